-- The last sequence the ingest_batches ledger has per collector run (host, run_id).
-- Data: {{data}} (host String, run_id UInt64), one row per run, sent as data.
SELECT host, run_id, max(sequence) AS last_sequence
FROM ingest_batches
WHERE (host, run_id) IN (SELECT host, run_id FROM {{data}})
GROUP BY host, run_id
