-- Which of a group's batch identities the ingest_batches ledger already has (loaded before).
-- Data: {{data}} (host String, run_id UInt64, sequence UInt64), one row per identity, sent as
-- data (an external table on the server, chDB's Python() table), so this statement stays the
-- same size for any number of identities; the tuple IN uses the ledger's primary key.
SELECT DISTINCT host, run_id, sequence
FROM ingest_batches
WHERE (host, run_id, sequence) IN (SELECT host, run_id, sequence FROM {{data}})
