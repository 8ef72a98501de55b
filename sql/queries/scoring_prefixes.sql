-- Per (pop, prefix) scores over the lookback window, from scoring_timeline.sql
-- (composed by controller/scoring/query.py), for windows of at most 64 buckets
-- (scoring_prefixes_long.sql: longer ones).  Only buckets where the prefix counted:
--   duty_cycle = bad / counted buckets
--   counted_mask, bad_mask = bit i set: the prefix counted / was bad in bucket i of the
--     window, i = (bucket - %(start)s) / %(bucket_seconds)s; controller/scoring/flaps.py
--     counts the bad<->good changes between consecutive counted buckets from them
--     (transitions, flap_ratio): two numbers per prefix instead of a sorted array
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
    counted_mask,
    bad_mask,
    if(counted_buckets > 0, bad_buckets / counted_buckets, 0.) AS duty_cycle,
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
        groupBitOr(bitShiftLeft(toUInt64(counted), slot)) AS counted_mask,
        groupBitOr(bitShiftLeft(toUInt64(bad), slot)) AS bad_mask,
        if(counted_buckets > 0, sumIf(floor(stat), counted) / counted_buckets, nan) AS median_delivery_rate,
        if(counted_buckets > 0, sumIf(floor(low), counted) / counted_buckets, nan) AS low_delivery_rate,
        if(counted_buckets > 0, sumIf(rtt, counted) / counted_buckets / 1000., nan) AS median_min_rtt_ms,
        toUInt32(sumIf(rtt < %(min_rtt_us)s, counted)) AS low_rtt_buckets
    FROM
    (
        SELECT
            *,
            -- the bucket's bit (0..63: the caller sends no longer window)
            toUInt8(intDiv(toUInt32(bucket) - toUInt32(%(start)s), %(bucket_seconds)s)) AS slot
        FROM ({{timeline}})
    )
    GROUP BY key  -- cityHash64(pop, prefix): one fixed-width key groups faster than two strings
)
ORDER BY pop, prefix
