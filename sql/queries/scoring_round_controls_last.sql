-- The deny list the latest earlier round of each POP applied (sql/migrations/012_operator_controls.sql),
-- within a bounded recent range: a round compares it with its own and logs a change.
-- Parameters: %(pop)s ('' = every POP), %(now_ns)s (the round's time, excluded), %(since)s.
SELECT
    pop,
    argMax(deny, round_time_ns) AS last_deny,
    argMax(round_id, round_time_ns) AS last_round_id
FROM round_controls
WHERE (%(pop)s = '' OR pop = %(pop)s) AND round_time >= %(since)s AND round_time_ns < %(now_ns)s
GROUP BY pop
