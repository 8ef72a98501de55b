-- explain: the latest round at or before a time that decided one prefix of a POP (wrote its
-- `selections` row); explain uses the settings that round recorded (scoring_round_settings.sql).
-- No row: no round decided the prefix by then.
-- Parameters: %(pop)s, %(prefix)s, %(now_ns)s (the latest round_time_ns that counts).
SELECT
    round_id,
    round_time_ns
FROM selections
WHERE pop = %(pop)s AND prefix = %(prefix)s AND round_time_ns <= %(now_ns)s
ORDER BY round_time_ns DESC
LIMIT 1
