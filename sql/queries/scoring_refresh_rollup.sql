-- (Re)compute the per-prefix statistics of the given (pop, bucket)s from the rollup
-- into the scoring_buckets cache, tagged with %(version)s.  The aggregate states are
-- merged here once per bucket instead of on every round (reading millions of
-- quantile states is what a full rescore would spend its time on).
--   stat = median, low = 10th percentile of delivery_rate of qualifying flows
--   (bytes_acked > 100 KB, baked into the rollup); rtt = median min_rtt (µs) of them,
--   floored: ClickHouse 18.16 returns quantiles of UInt32 as UInt32, newer servers as Float64.
-- Parameters: %(source)s, %(version)s, %(start)s, %(end)s; {keys} = a list of
-- (pop, toUInt32(bucket)) tuples rendered by controller/scoring_query.py.
INSERT INTO scoring_buckets
    (pop, source, bucket, version, prefix, family, samples, qualifying, stat, low, rtt)
SELECT
    pop,
    %(source)s,
    bucket,
    %(version)s,
    prefix,
    family,
    samples,
    qualifying,
    rate_q[3],
    rate_q[2],
    floor(rtt_q[2])
FROM
(
    SELECT
        pop,
        bucket,
        prefix,
        family,
        toUInt64(countMerge(samples)) AS samples,
        toUInt64(countIfMerge(qualifying)) AS qualifying,
        quantilesIfMerge(0.05, 0.1, 0.5)(delivery_rate_qual_q) AS rate_q,
        quantilesIfMerge(0.1, 0.5)(min_rtt_qual_q) AS rtt_q
    FROM tcpinfo_5m
    WHERE bucket >= %(start)s AND bucket < %(end)s
      AND (pop, toUInt32(bucket)) IN ({keys})
    GROUP BY pop, bucket, prefix, family
)
