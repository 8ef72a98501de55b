-- The last recorded decision for one prefix of a POP (explain).
SELECT round_id, round_time, decision, reason FROM selections
WHERE pop = %(pop)s AND prefix = %(prefix)s
ORDER BY round_time_ns DESC LIMIT 1
