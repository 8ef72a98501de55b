-- The recorded sequence gaps of some collector runs (host, run_id), filled or not.
-- Data: {{data}} (host String, run_id UInt64), one row per run, sent as data.
SELECT host, run_id, from_sequence, any(to_sequence) AS to_sequence, any(pop) AS pop, toUInt32(any(time)) AS t
FROM ingest_sequence_gaps
WHERE (host, run_id) IN (SELECT host, run_id FROM {{data}})
GROUP BY host, run_id, from_sequence
