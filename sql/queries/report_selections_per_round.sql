-- dyncc report: per round and POP, prefixes newly selected for BBR (decision 'select', or the
-- first round of a trial: 'trial' whose selected_since, the trial's start, is the round time),
-- all on BBR this round ('select', 'keep', or a trial block whose algorithm is bbr), in a trial
-- ('trial', either arm) and held out as the control group ('holdout').
-- Only rounds whose decisions reached the edges: the round's outcome (its latest round_outcomes
-- row) is published, unchanged or legacy.  A round re-run at the same time counts once (the
-- one recorded last).
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s.
SELECT
    toUnixTimestamp(round_time) AS ts,
    pop,
    any(round_id) AS round,
    countIf(decision = 'select' OR (decision = 'trial' AND selected_since = round_time)) AS new_selected,
    countIf(decision IN ('select', 'keep') OR (decision = 'trial' AND algorithm = 'bbr')) AS on_bbr,
    countIf(decision = 'trial') AS in_trial,
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
