-- Per (pop, prefix) scores over the lookback window, from scoring_timeline.sql
-- (composed by controller/scoring_query.py).  Only buckets where the prefix counted:
--   duty_cycle = bad / counted buckets
--   flap_ratio = bad<->good changes between consecutive counted buckets / (counted - 1)
--   median_delivery_rate, low_delivery_rate, median_min_rtt_ms = medians over the
--   counted buckets of the per-bucket median delivery_rate, 10th percentile
--   delivery_rate and median min_rtt.
-- Prefixes seen in the window but never counted come out with counted_buckets = 0.
SELECT
    pop,
    prefix,
    family,
    samples,
    qualifying,
    counted_buckets,
    bad_buckets,
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
        any(pop) AS pop,
        any(prefix) AS prefix,
        any(family) AS family,
        toUInt64(sum(samples)) AS samples,
        toUInt64(sum(qualifying)) AS qualifying,
        toUInt32(sum(counted)) AS counted_buckets,
        toUInt32(sum(bad)) AS bad_buckets,
        -- bucket and bad packed in one number: one numeric sort orders the timeline
        arrayMap(c -> c % 2, arraySort(groupArrayIf(toUInt64(toUInt32(bucket)) * 2 + bad, counted)))
            AS flags,
        medianIf(stat, counted) AS median_delivery_rate,
        medianIf(low, counted) AS low_delivery_rate,
        medianIf(rtt, counted) / 1000. AS median_min_rtt_ms
    FROM ({timeline})
    GROUP BY key  -- cityHash64(pop, prefix): one fixed-width key groups faster than two strings
)
