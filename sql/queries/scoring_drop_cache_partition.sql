-- Drop one day of the scoring_cache cache; %(partition)s is the YYYYMMDD partition as an integer.
ALTER TABLE scoring_cache DROP PARTITION %(partition)s
