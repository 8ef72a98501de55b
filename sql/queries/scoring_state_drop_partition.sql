-- Drop one generation of the scoring state; %(partition)s is the generation (UInt64).
ALTER TABLE scoring_state DROP PARTITION %(partition)s
