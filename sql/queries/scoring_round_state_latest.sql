-- The round whose `selections` rows are each POP's controller state (controller/scoring/state.py):
-- per POP, the latest round up to %(now_ns)s (by round time, then by when its outcome was
-- recorded) whose outcome is one of %(statuses)s.  A round's outcome is the status of its latest
-- round_outcomes row (sql/migrations/007_round_outcomes.sql).
-- Parameters: %(pop)s ('' = all), %(now_ns)s (round time, ns), %(since)s (DateTime: look no
-- further back), %(statuses)s (array of statuses).
SELECT
    pop,
    round_id,
    outcome,
    first_time
FROM
(
    SELECT
        pop,
        round_id,
        min(round_time) AS first_time,
        min(round_time_ns) AS first_time_ns,
        max(recorded_ns) AS last_recorded_ns,
        toString(argMax(status, recorded_ns)) AS outcome
    FROM round_outcomes
    WHERE (%(pop)s = '' OR pop = %(pop)s)
      AND round_time_ns <= %(now_ns)s
      AND round_time >= %(since)s
    GROUP BY pop, round_id
)
WHERE has(%(statuses)s, outcome)
ORDER BY pop, first_time_ns DESC, last_recorded_ns DESC
LIMIT 1 BY pop
