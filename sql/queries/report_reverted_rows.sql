-- dyncc report, the revert decisions in the window (spliced as {{reverted}}): rounds whose
-- decisions reached the edges only (the round's latest round_outcomes row is published,
-- unchanged or legacy), as in report_treatment_groups.sql.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s.
SELECT
    round_time,
    pop,
    prefix,
    reason,
    effect,
    holdout_effect,
    baseline_low_rate,
    low_delivery_rate
FROM selections
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND round_time >= %(start)s AND round_time < %(end)s
  AND decision = 'revert'
  AND (pop, round_id) IN
  (
      SELECT pop, round_id
      FROM round_outcomes
      WHERE (%(pop)s = '' OR pop = %(pop)s) AND round_time >= %(start)s AND round_time < %(end)s
      GROUP BY pop, round_id
      HAVING argMax(status, recorded_ns) IN ('published', 'unchanged', 'legacy')
  )
