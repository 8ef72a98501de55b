-- Samples per (pop, bucket) in the 5-minute rollup over [start, end): compared with
-- the scoring_cache cache to find the buckets to (re)compute.  Cheap: count states only.
-- Parameters: %(pop)s ('' = every POP), %(start)s, %(end)s (the part of the window to check).
SELECT pop, bucket, toUInt64(countMerge(samples)) AS samples
FROM tcpinfo_5m
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND bucket >= %(start)s AND bucket < %(end)s
GROUP BY pop, bucket
