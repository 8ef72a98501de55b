-- Scoring input from the 5-minute rollup tcpinfo_5m: one row per (pop, bucket,
-- prefix, family) in [start, end), merged with FINAL (a streaming merge along the
-- table's sort key, cheaper than a GROUP BY over millions of aggregate states).
-- Qualifying flows (bytes_acked > 100 KB) are baked into the rollup; another
-- --min-bytes or --bucket reads scoring_source_raw.sql instead.
-- Two kinds of rows (UNION ALL), so the min_rtt states are read only for the
-- recent buckets [rtt_start, end) (reading aggregate states dominates the cost):
--   has_stats = 1: samples, qualifying, rate_q = delivery_rate quantiles
--                  (0.05, 0.1, 0.5) of qualifying flows
--   has_rtt   = 1: qualifying, rtt = median min_rtt of qualifying flows (µs)
-- Parameters: %(pop)s ('' = every POP), %(start)s, %(end)s, %(rtt_start)s.
SELECT
    pop,
    bucket,
    prefix,
    family,
    toUInt8(1) AS has_stats,
    toUInt8(0) AS has_rtt,
    toUInt64(finalizeAggregation(samples)) AS samples,
    toUInt64(finalizeAggregation(qualifying)) AS qualifying,
    finalizeAggregation(delivery_rate_qual_q) AS rate_q,
    toFloat64(nan) AS rtt
FROM tcpinfo_5m FINAL
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND bucket >= %(start)s AND bucket < %(end)s
UNION ALL
SELECT
    pop,
    bucket,
    prefix,
    family,
    toUInt8(0) AS has_stats,
    toUInt8(1) AS has_rtt,
    toUInt64(0) AS samples,
    toUInt64(finalizeAggregation(qualifying)) AS qualifying,
    [toFloat64(nan), toFloat64(nan), toFloat64(nan)] AS rate_q,
    finalizeAggregation(min_rtt_qual_q)[2] AS rtt
FROM tcpinfo_5m FINAL
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND bucket >= %(rtt_start)s AND bucket < %(end)s
