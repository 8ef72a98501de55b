-- Per (pop, prefix): the bucket timeline as fixed-length vectors (one slot per
-- bucket of the lookback window, slot 0 = the oldest) next to the POP's
-- per-bucket thresholds, and the scores.  The innermost FROM takes
-- scoring_source_rollup.sql or scoring_source_raw.sql (composed by
-- controller/scoring_query.py).  No window functions (ClickHouse 18.16):
--   1. per (pop, prefix): groupArrayInsertAt builds the slot vectors;
--   2. per pop: quantileExactIfForEach gives every slot's threshold across the
--      prefixes, groupArray keeps the prefix rows, ARRAY JOIN spreads them back;
--   3. per prefix: array functions give bad/good, duty cycle and flap ratio.
-- Definitions:
--   counted (slot)  qualifying samples >= %(min_samples)s
--   stat (slot)     median delivery_rate of qualifying flows (bytes/s)
--   threshold       quantileExact(%(threshold_quantile)s) of stat over the POP's
--                   prefixes counted in that slot
--   bad (slot)      counted AND stat < threshold
--   duty_cycle      bad / counted slots
--   flap_ratio      bad<->good changes between consecutive counted slots / (counted - 1)
--   median_delivery_rate, low_delivery_rate   medians over counted slots of the
--                   per-bucket median and 10th percentile delivery_rate
--   median_min_rtt_ms   median over counted recent slots (>= rtt_start) of the
--                   per-bucket median min_rtt
-- Prefixes seen in the window but never counted come out with counted_buckets = 0.
-- Parameters: %(start_ts)s (UInt32 of start), %(bucket_seconds)s, %(buckets)s, plus the source's.
SELECT
    pop,
    prefix,
    family,
    samples,
    qualifying,
    qualifying_vec,
    counted_vec,
    stat_vec,
    thresholds,
    bad_vec,
    toUInt32(arraySum(counted_vec)) AS counted_buckets,
    toUInt32(arraySum(bad_vec)) AS bad_buckets,
    toUInt32(arraySum(arrayMap((a, b) -> a != b, arrayPopFront(flags), arrayPopBack(flags))))
        AS transitions,
    if(counted_buckets > 0, bad_buckets / counted_buckets, 0.) AS duty_cycle,
    if(counted_buckets > 1, transitions / (counted_buckets - 1), 0.) AS flap_ratio,
    median_delivery_rate,
    low_delivery_rate,
    median_min_rtt_ms
FROM
(
    SELECT
        pop,
        prefix,
        family,
        samples,
        qualifying,
        qualifying_vec,
        counted_vec,
        stat_vec,
        thresholds,
        arrayMap((s, c, t) -> toUInt8(c AND s < t), stat_vec, counted_vec, thresholds) AS bad_vec,
        arrayFilter((b, c) -> c, bad_vec, counted_vec) AS flags,
        median_delivery_rate,
        low_delivery_rate,
        median_min_rtt_ms
    FROM
    (
        SELECT
            pop,
            quantileExactIfForEach(%(threshold_quantile)s)(p_stat_vec, p_counted_vec) AS thresholds,
            groupArray(p_prefix) AS a_prefix,
            groupArray(p_family) AS a_family,
            groupArray(p_samples) AS a_samples,
            groupArray(p_qualifying) AS a_qualifying,
            groupArray(p_qualifying_vec) AS a_qualifying_vec,
            groupArray(p_counted_vec) AS a_counted_vec,
            groupArray(p_stat_vec) AS a_stat_vec,
            groupArray(p_median) AS a_median,
            groupArray(p_low) AS a_low,
            groupArray(p_rtt) AS a_rtt
        FROM
        (
            SELECT
                pop,
                prefix AS p_prefix,
                any(family) AS p_family,
                toUInt64(sumIf(samples, has_stats)) AS p_samples,
                toUInt64(sumIf(qualifying, has_stats)) AS p_qualifying,
                arrayResize(groupArrayInsertAtIf(qualifying, slot, has_stats), %(buckets)s)
                    AS p_qualifying_vec,
                arrayResize(groupArrayInsertAtIf(counted, slot, has_stats), %(buckets)s) AS p_counted_vec,
                arrayResize(groupArrayInsertAtIf(stat, slot, has_stats AND counted), %(buckets)s)
                    AS p_stat_vec,
                medianIf(stat, has_stats AND counted) AS p_median,
                medianIf(low, has_stats AND counted) AS p_low,
                medianIf(rtt, has_rtt AND counted) / 1000. AS p_rtt
            FROM
            (
                SELECT
                    pop,
                    prefix,
                    family,
                    has_stats,
                    has_rtt,
                    samples,
                    qualifying,
                    toUInt8(qualifying >= %(min_samples)s) AS counted,
                    rate_q[3] AS stat,
                    rate_q[2] AS low,
                    rtt,
                    toUInt32(intDiv(toUInt32(bucket) - %(start_ts)s, %(bucket_seconds)s)) AS slot
                FROM ({source})
            )
            GROUP BY pop, prefix
        )
        GROUP BY pop
    )
    ARRAY JOIN
        a_prefix AS prefix,
        a_family AS family,
        a_samples AS samples,
        a_qualifying AS qualifying,
        a_qualifying_vec AS qualifying_vec,
        a_counted_vec AS counted_vec,
        a_stat_vec AS stat_vec,
        a_median AS median_delivery_rate,
        a_low AS low_delivery_rate,
        a_rtt AS median_min_rtt_ms
)
