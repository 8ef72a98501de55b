-- Samples per (pop, bucket) in the tcpinfo_5m_nal rollup over [start, end): the default scoring
-- (app-limited samples left out, migration 009) compares them with the scoring_cache cache to
-- find the buckets to (re)compute, like scoring_fresh_rollup.sql does for tcpinfo_5m; the same
-- table as scoring_refresh_rollup_nal.sql, so a bucket is never taken as current from one
-- table's rows while the other has not got them yet.  Cheap: count states only.
-- Parameters: %(pop)s ('' = every POP), %(start)s, %(end)s (the part of the window to check).
SELECT pop, bucket, toUInt64(countMerge(samples)) AS samples
FROM tcpinfo_5m_nal
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND bucket >= %(start)s AND bucket < %(end)s
GROUP BY pop, bucket
