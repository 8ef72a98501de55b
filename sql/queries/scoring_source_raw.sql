-- Scoring input from the raw tcpinfo table, for a bucket other than 5 minutes (the
-- lab's accelerated clock) or a qualifying threshold other than the rollup's 100 KB.
-- Same columns as scoring_source_rollup.sql, one row per (pop, bucket, prefix, family).
-- Parameters: %(pop)s ('' = every POP), %(start)s, %(end)s, %(rtt_start)s,
-- %(bucket_seconds)s, %(min_bytes)s (a flow qualifies when bytes_acked > min_bytes).
SELECT
    pop,
    toDateTime(intDiv(toUInt32(time), %(bucket_seconds)s) * %(bucket_seconds)s) AS bucket,
    prefix,
    family,
    toUInt8(1) AS has_stats,
    toUInt8(bucket >= %(rtt_start)s) AS has_rtt,
    toUInt64(count()) AS samples,
    toUInt64(countIf(bytes_acked > %(min_bytes)s)) AS qualifying,
    quantilesIf(0.05, 0.1, 0.5)(delivery_rate, bytes_acked > %(min_bytes)s) AS rate_q,
    quantileIf(0.5)(min_rtt, bytes_acked > %(min_bytes)s) AS rtt
FROM tcpinfo
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND time >= %(start)s AND time < %(end)s
GROUP BY pop, bucket, prefix, family
