-- Per (pop, prefix) scores over the lookback window: the scalar columns of
-- scoring_vectors.sql (composed by controller/scoring_query.py); see that file
-- for the definitions.
SELECT
    pop,
    prefix,
    family,
    samples,
    qualifying,
    counted_buckets,
    bad_buckets,
    transitions,
    duty_cycle,
    flap_ratio,
    median_delivery_rate,
    low_delivery_rate,
    median_min_rtt_ms
FROM ({vectors})
