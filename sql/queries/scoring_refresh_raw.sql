-- Per-prefix statistics of the given (pop, bucket)s from raw tcpinfo (bucket of
-- %(bucket_seconds)s, a flow qualifies when bytes_acked > %(min_bytes)s); the {{source}} of
-- scoring_refresh_insert.sql, same columns as scoring_refresh_rollup.sql: one row per client
-- network, both socket families of a prefix together, `family` the prefix's.  A qualifying
-- sample counts (`counts`: qualifying, rate_q, rtt_q) only when it is not app-limited, unless
-- %(include_app_limited)s is 1 (migration 009, the setting include_app_limited).
-- Parameters: %(start)s, %(end)s, %(bucket_seconds)s, %(min_bytes)s, %(include_app_limited)s;
-- {{keys}} = a list of (pop, toUInt32(bucket)) tuples.
WITH bytes_acked > %(min_bytes)s AND (%(include_app_limited)s OR app_limited = 0) AS counts
SELECT
    pop,
    toDateTime(intDiv(toUInt32(time), %(bucket_seconds)s) * %(bucket_seconds)s) AS bucket,
    prefix,
    if(position(prefix, ':') > 0, 10, 2) AS family,
    toUInt64(count()) AS samples,
    toUInt64(countIf(counts)) AS qualifying,
    quantilesIf(0.05, 0.1, 0.5)(delivery_rate, counts) AS rate_q,
    quantileIf(0.5)(min_rtt, counts) AS rtt_q
FROM tcpinfo
WHERE time >= %(start)s AND time < %(end)s
  AND (pop, intDiv(toUInt32(time), %(bucket_seconds)s) * %(bucket_seconds)s) IN ({{keys}})
GROUP BY pop, bucket, prefix
