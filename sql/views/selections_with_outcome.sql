-- Grafana panel: Table.  Every controller decision per round and prefix with what became of it:
-- $__timeFilter(col) is Grafana's macro, not dyncc's template syntax; dyncc runs this file with it
-- expanded by controller/store/sql.py render_time_filter (as the ClickHouse data source does).
-- the round's outcome for the POP (its latest round_outcomes row): published / unchanged (in
-- force on the edges), rejected (validation refused the config), publish_failed, held (a rollout
-- in flight), killed, recorded (no publisher).  Only 'select'/'keep' rows of in-force rounds are
-- prefixes that really got BBR.
-- Grafana ClickHouse data source, Format "Table": rows (time, pop, prefix, decision, outcome, reason).
SELECT
    time,
    pop,
    prefix,
    decision,
    if(outcome = '', 'unknown', outcome) AS outcome,
    reason
FROM
(
    SELECT round_time AS time, round_id, pop, prefix, toString(decision) AS decision, reason
    FROM selections
    WHERE $__timeFilter(round_time)
) AS s
ANY LEFT JOIN
(
    SELECT round_id, pop, toString(argMax(status, recorded_ns)) AS outcome
    FROM round_outcomes
    WHERE $__timeFilter(round_time)
    GROUP BY round_id, pop
) AS o USING (round_id, pop)
ORDER BY time, pop, prefix
