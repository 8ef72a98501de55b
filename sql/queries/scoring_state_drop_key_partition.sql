-- Drop one day of scoring_state_keys; %(partition)s is the YYYYMMDD partition as an integer.
ALTER TABLE scoring_state_keys DROP PARTITION %(partition)s
