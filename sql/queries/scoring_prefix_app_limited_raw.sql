-- Per (pop, bucket) of the window: the qualifying samples (bytes_acked > %(min_bytes)s) of one
-- prefix that are app-limited, from raw tcpinfo in buckets of %(bucket_seconds)s: the
-- {{app_limited}} of scoring_prefix_timeline.sql (explain) on the raw path.
-- Parameters: %(pop)s ('' = every POP), %(prefix)s, %(start)s, %(end)s, %(bucket_seconds)s,
-- %(min_bytes)s.
SELECT
    pop,
    toDateTime(intDiv(toUInt32(time), %(bucket_seconds)s) * %(bucket_seconds)s) AS bucket,
    toUInt64(countIf(bytes_acked > %(min_bytes)s AND app_limited != 0)) AS app_limited
FROM tcpinfo
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND prefix = %(prefix)s
  AND time >= %(start)s AND time < %(end)s
GROUP BY pop, bucket
