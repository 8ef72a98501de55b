-- Grafana panel: Bar chart (or Time series drawn as bars); one series per POP.
-- $__timeFilter(col) is Grafana's macro, not dyncc's template syntax; dyncc runs this file with it
-- expanded by controller/store/sql.py render_time_filter (as the ClickHouse data source does).
-- Prefixes newly selected for BBR per controller round (decision = 'select'); a steady POP
-- selects few new prefixes per round.  Only rounds whose decisions reached the edges (outcome
-- published / unchanged / legacy in round_outcomes); a round re-run at the same time counts once.
-- Grafana ClickHouse data source, Format "Time series": long rows (time, pop, new_selected).
SELECT
    round_time AS time,
    pop,
    countIf(decision = 'select') AS new_selected
FROM selections
WHERE $__timeFilter(round_time)
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
          WHERE $__timeFilter(round_time)
          GROUP BY pop, round_id
      )
      WHERE outcome IN ('published', 'unchanged', 'legacy')
      GROUP BY pop, first_time
  )
GROUP BY time, pop
ORDER BY time, pop
