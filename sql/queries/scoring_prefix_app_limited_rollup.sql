-- Per (pop, bucket) of the window: the qualifying samples of one prefix that are app-limited,
-- from the tcpinfo_5m_nal rollup (migration 009): the {{app_limited}} of
-- scoring_prefix_timeline.sql (explain).  Buckets from before the migration have no rows.
-- Parameters: %(pop)s ('' = every POP), %(prefix)s, %(start)s, %(end)s.
SELECT pop, bucket, toUInt64(countIfMerge(qualifying_al)) AS app_limited
FROM tcpinfo_5m_nal
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND bucket >= %(start)s AND bucket < %(end)s
  AND prefix = %(prefix)s
GROUP BY pop, bucket
