-- View new_selections_per_round (created by `dyncc schema apply`; README "Views").
-- Prefixes newly selected for BBR per controller round (decision = 'select'); a steady POP
-- selects few new prefixes per round.  Only rounds whose decisions reached the edges (outcome
-- published / unchanged / legacy in round_outcomes); a round re-run at the same time counts once.
-- Columns: time (the round's time), pop, new_selected.
-- No time filter here: the query adds its own on `time`, e.g. Grafana (Bar chart, or Time series
-- drawn as bars; one series per POP):
--   SELECT time, pop, new_selected FROM new_selections_per_round WHERE $__timeFilter(time) ORDER BY time, pop
SELECT
    round_time AS time,
    pop,
    countIf(decision = 'select') AS new_selected
FROM selections
WHERE (pop, round_id) IN
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
          GROUP BY pop, round_id
      )
      WHERE outcome IN ('published', 'unchanged', 'legacy')
      GROUP BY pop, first_time
  )
GROUP BY time, pop
