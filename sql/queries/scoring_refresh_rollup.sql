-- Per-prefix statistics of the given (pop, bucket)s from the tcpinfo_5m rollup; the {{source}}
-- of scoring_refresh_insert.sql, same columns as scoring_refresh_raw.sql.  One row per client
-- network: the rollup keeps one row per socket family, and an IPv4 client seen on both IPv4 and
-- IPv6 (::ffff:a.b.c.d) sockets has the same IPv4 prefix in both, so the rows are merged here and
-- `family` is the prefix's (10 when it contains ':', else 2), not the socket's.  The aggregate
-- states are merged here once per bucket instead of on every round (reading millions of
-- quantile states is what a full rescore would spend its time on).  Qualifying flows
-- (bytes_acked > 100 KB) are baked into the rollup.
-- Parameters: %(start)s, %(end)s; {{keys}} = a list of (pop, toUInt32(bucket)) tuples
-- rendered by controller/scoring/query.py.
SELECT
    pop,
    bucket,
    prefix,
    if(position(prefix, ':') > 0, 10, 2) AS family,
    toUInt64(countMerge(samples)) AS samples,
    toUInt64(countIfMerge(qualifying)) AS qualifying,
    quantilesIfMerge(0.05, 0.1, 0.5)(delivery_rate_qual_q) AS rate_q,
    arrayElement(quantilesIfMerge(0.1, 0.5)(min_rtt_qual_q), 2) AS rtt_q
FROM tcpinfo_5m
WHERE bucket >= %(start)s AND bucket < %(end)s
  AND (pop, toUInt32(bucket)) IN ({{keys}})
GROUP BY pop, bucket, prefix
