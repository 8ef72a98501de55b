-- A new generation of the scoring state: the base generation's rows plus the contributions of
-- the (pop, bucket, version)s that entered the window minus those that left it, summed per
-- (pop, prefix) (UInt64 sums wrap modulo 2^64: a subtraction is exact); a prefix no bucket of
-- the window holds any more (seen = 0) is left out.  {{parts}} = the branches
-- (scoring_state_base.sql, scoring_state_contributions.sql with sign +1 / -1) joined by
-- UNION ALL, composed by controller/scoring/incremental.py (at most three).  On a cluster it
-- runs on every shard, over the shard's own rows.
-- Parameters: %(source)s, %(params)s, %(generation)s and the branches'.
INSERT INTO scoring_state
    (pop, source, params, generation, prefix, family, seen, samples, qualifying, counted, bad,
     counted_mask, bad_mask, low_rtt, sum_stat, sum_low, sum_rtt)
SELECT
    any(pop),
    %(source)s,
    %(params)s,
    %(generation)s,
    any(prefix),
    any(family),
    sum(d_seen) AS total_seen,
    sum(d_samples),
    sum(d_qualifying),
    sum(d_counted),
    sum(d_bad),
    sum(d_counted_mask),
    sum(d_bad_mask),
    sum(d_low_rtt),
    sum(d_sum_stat),
    sum(d_sum_low),
    sum(d_sum_rtt)
FROM
(
{{parts}}
)
GROUP BY cityHash64(pop, prefix)  -- one fixed-width key groups faster than two strings
HAVING total_seen != 0
