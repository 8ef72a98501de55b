-- Whether the INSERT with this query_id is still running on the server (a row) or over (none).
-- ClickHouseStore waits for it after an INSERT whose connection went away mid-stream: what the
-- server keeps of it lands before the query leaves system.processes, so the retry's ledger
-- look-up sees it.
SELECT 1 FROM system.processes WHERE query_id = %(query_id)s
