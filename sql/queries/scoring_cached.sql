-- What the scoring_buckets cache holds for [start, end): samples per computed version
-- of each (pop, bucket).  The newest version whose samples equal the source's is current.
-- Parameters: %(source)s, %(pop)s ('' = every POP), %(start)s, %(end)s.
SELECT pop, bucket, version, toUInt64(sum(samples)) AS samples
FROM scoring_buckets
WHERE source = %(source)s
  AND (%(pop)s = '' OR pop = %(pop)s)
  AND bucket >= %(start)s AND bucket < %(end)s
GROUP BY pop, bucket, version
