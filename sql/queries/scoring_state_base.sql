-- The state a round builds on, as contributions (one branch of scoring_state_update.sql): the
-- rows of each POP's committed generation.
-- Parameters: %(source)s, %(params)s; {{bases}} = the (pop, generation) tuples (one per POP).
SELECT
    pop,
    prefix,
    family,
    seen AS d_seen,
    samples AS d_samples,
    qualifying AS d_qualifying,
    counted AS d_counted,
    bad AS d_bad,
    counted_mask AS d_counted_mask,
    bad_mask AS d_bad_mask,
    low_rtt AS d_low_rtt,
    sum_stat AS d_sum_stat,
    sum_low AS d_sum_low,
    sum_rtt AS d_sum_rtt
FROM scoring_state
WHERE source = %(source)s
  AND params = %(params)s
  AND cityHash64(pop, generation) IN
      (
          SELECT cityHash64(tupleElement(v, 1), toUInt64(tupleElement(v, 2)))
          FROM (SELECT arrayJoin([{{bases}}]) AS v)
      )
