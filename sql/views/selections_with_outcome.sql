-- View selections_with_outcome (created by `dyncc schema apply`; README "Views").
-- Every controller decision per round and prefix with what became of it: the round's outcome
-- for the POP (its latest round_outcomes row): published / unchanged (in force on the edges),
-- rejected (validation refused the config), publish_failed, held (a rollout in flight), killed,
-- recorded (no publisher), unknown (no outcome row).  Only 'select'/'keep' rows of in-force
-- rounds are prefixes that really got BBR.
-- Columns: time (the round's time), pop, prefix, decision, outcome, reason.
-- No time filter here: the query adds its own on `time`, e.g. Grafana (Table):
--   SELECT * FROM selections_with_outcome WHERE $__timeFilter(time) ORDER BY time, pop, prefix
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
) AS s
ANY LEFT JOIN
(
    SELECT round_id, pop, toString(argMax(status, recorded_ns)) AS outcome
    FROM round_outcomes
    GROUP BY round_id, pop
) AS o USING (round_id, pop)
