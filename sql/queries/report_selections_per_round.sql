-- dyncc report: per round and POP, prefixes newly selected for BBR (decision 'select'),
-- all on BBR this round ('select' or 'keep') and held out as the control group ('holdout').
-- Only rounds whose decisions reached the edges: the round's outcome (its latest round_outcomes
-- row) is published, unchanged or legacy.  A round re-run at the same time counts once (the
-- one recorded last).
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s.
SELECT
    toUnixTimestamp(round_time) AS ts,
    pop,
    any(round_id) AS round,
    countIf(decision = 'select') AS new_selected,
    countIf(decision IN ('select', 'keep')) AS on_bbr,
    countIf(decision = 'holdout') AS holdout
FROM selections
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND round_time >= %(start)s AND round_time < %(end)s
  AND (pop, round_id) IN
  (
      SELECT pop, argMax(round_id, last_recorded_ns)
      FROM
      (
          SELECT
              pop,
              round_id,
              min(round_time) AS first_time,
              max(recorded_ns) AS last_recorded_ns,
              argMax(status, recorded_ns) AS outcome
          FROM round_outcomes
          WHERE (%(pop)s = '' OR pop = %(pop)s)
            AND round_time >= %(start)s AND round_time < %(end)s
          GROUP BY pop, round_id
      )
      WHERE outcome IN ('published', 'unchanged', 'legacy')
      GROUP BY pop, first_time
  )
GROUP BY round_time, pop
ORDER BY pop, ts
