-- Batches whose rows in tcpinfo disagree with the ingest ledger (duplicates or losses).
-- Parameters: %(start)s, %(end)s (DateTime literals, the batches' poll time).
-- An empty result means every ledgered batch is in tcpinfo exactly once.
SELECT host, run_id, sequence, ledger_rows, table_rows
FROM
(
    SELECT host, run_id, sequence, sum(rows) AS ledger_rows, count() AS ledger_entries
    FROM ingest_batches
    WHERE batch_time >= %(start)s AND batch_time < %(end)s AND rows > 0
    GROUP BY host, run_id, sequence
) AS l
ANY LEFT JOIN
(
    SELECT host, run_id, sequence, count() AS table_rows
    FROM tcpinfo
    WHERE time >= %(start)s AND time < %(end)s
    GROUP BY host, run_id, sequence
) AS t USING (host, run_id, sequence)
WHERE ledger_entries > 1 OR ledger_rows != table_rows
ORDER BY host, run_id, sequence
