-- The versions the scoring_cache cache holds for [start, end), with the source's
-- sample count each was computed from; the newest version of a (pop, bucket) is current.
-- Parameters: %(source)s, %(pop)s ('' = every POP), %(start)s, %(end)s.
SELECT pop, bucket, version, samples
FROM scoring_versions
WHERE source = %(source)s
  AND (%(pop)s = '' OR pop = %(pop)s)
  AND bucket >= %(start)s AND bucket < %(end)s
