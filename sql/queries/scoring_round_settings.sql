-- The settings one controller round recorded for one POP (sql/migrations/011_round_settings.sql,
-- controller/scoring/round_settings.py): explain reads them back.  No row: the round ran before
-- the table existed.
-- Parameters: %(pop)s, %(round_id)s.
SELECT
    round_time_ns,
    expire_seconds,
    scoring,
    evidence
FROM round_settings
WHERE pop = %(pop)s AND round_id = %(round_id)s
ORDER BY round_time_ns DESC
LIMIT 1
