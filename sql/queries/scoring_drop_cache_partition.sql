-- Drop one day of the scoring_buckets cache; %(partition)s is the YYYYMMDD partition as an integer.
ALTER TABLE scoring_buckets DROP PARTITION %(partition)s
