-- Per (pop, prefix) scores over a lookback window of more than 64 buckets (the bucket
-- masks of scoring_prefixes.sql, which serves the shorter ones faster, hold 64), from
-- scoring_timeline.sql (composed by controller/scoring/query.py): the scores with
-- transitions and flap_ratio computed here, from a sorted array of the counted
-- buckets' flags per prefix.  Only buckets where the prefix counted:
--   duty_cycle = bad / counted buckets
--   flap_ratio = bad<->good changes between consecutive counted buckets / (counted - 1)
--   median_delivery_rate, low_delivery_rate, median_min_rtt_ms = the per-bucket median
--     delivery_rate, 10th percentile delivery_rate (floored to whole bytes/s: the incremental
--     state, sql/queries/scoring_state_*.sql, adds integers exactly) and median min_rtt, averaged over
--     the counted buckets (averages: a median across buckets costs more than the rest
--     of the query together at 200k prefixes)
--   low_rtt_buckets = counted buckets whose median min_rtt < %(min_rtt_us)s µs; more
--     than half of the counted buckets = the prefix's median min_rtt is below it
-- Prefixes seen in the window but never counted come out with counted_buckets = 0.
-- Sorted by pop, prefix (what controller/scoring/query.py returns; sorting here is cheaper).
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
    median_min_rtt_ms,
    low_rtt_buckets
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
        if(counted_buckets > 0, sumIf(floor(stat), counted) / counted_buckets, nan) AS median_delivery_rate,
        if(counted_buckets > 0, sumIf(floor(low), counted) / counted_buckets, nan) AS low_delivery_rate,
        if(counted_buckets > 0, sumIf(rtt, counted) / counted_buckets / 1000., nan) AS median_min_rtt_ms,
        toUInt32(sumIf(rtt < %(min_rtt_us)s, counted)) AS low_rtt_buckets
    FROM ({{timeline}})
    GROUP BY key  -- cityHash64(pop, prefix): one fixed-width key groups faster than two strings
)
ORDER BY pop, prefix
