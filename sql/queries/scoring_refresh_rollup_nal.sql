-- Per-prefix statistics of the given (pop, bucket)s from the tcpinfo_5m_nal rollup, the default
-- scoring's: app-limited samples left out (migration 009).  The {{source}} of
-- scoring_refresh_insert.sql, same columns as scoring_refresh_rollup.sql (which reads tcpinfo_5m
-- with include_app_limited) and merged the same way: one row per client network, `family` the
-- prefix's.  qualifying = the qualifying (bytes_acked > 100 KB) samples that are not
-- app-limited; rate_q, rtt_q are theirs.
-- Parameters: %(start)s, %(end)s; {{keys}} = a list of (pop, toUInt32(bucket)) tuples
-- rendered by controller/scoring/query.py.
SELECT
    pop,
    bucket,
    prefix,
    if(position(prefix, ':') > 0, 10, 2) AS family,
    toUInt64(countMerge(samples)) AS samples,
    toUInt64(countIfMerge(qualifying_nal)) AS qualifying,
    quantilesIfMerge(0.05, 0.1, 0.5)(delivery_rate_nal_q) AS rate_q,
    arrayElement(quantilesIfMerge(0.1, 0.5)(min_rtt_nal_q), 2) AS rtt_q
FROM tcpinfo_5m_nal
WHERE bucket >= %(start)s AND bucket < %(end)s
  AND (pop, toUInt32(bucket)) IN ({{keys}})
GROUP BY pop, bucket, prefix
