-- Sequence gaps still open, one row per gap: batches a collector numbered that have not
-- reached tcpinfo.  A batch that arrived late (ingest_gap_fills) closes its place in the gap;
-- open_missing counts the places still empty, and fully filled gaps are left out.
-- Parameters: %(start)s, %(end)s (DateTime literals, poll time of the batch after a gap).
SELECT pop, host, run_id, from_sequence, to_sequence, open_missing, gap_time
FROM
(
    SELECT
        pop,
        host,
        run_id,
        from_sequence,
        gap_to AS to_sequence,
        greatest(gap_missing, filled) - filled AS open_missing,
        gap_time
    FROM
    (
        SELECT pop, host, run_id, from_sequence, any(to_sequence) AS gap_to, any(missing) AS gap_missing,
            any(time) AS gap_time
        FROM ingest_sequence_gaps
        WHERE time >= %(start)s AND time < %(end)s
        GROUP BY pop, host, run_id, from_sequence
    ) AS g
    ANY LEFT JOIN
    (
        SELECT host, run_id, from_sequence, uniqExact(sequence) AS filled
        FROM ingest_gap_fills
        WHERE time >= %(start)s AND time < %(end)s
        GROUP BY host, run_id, from_sequence
    ) AS f USING (host, run_id, from_sequence)
)
WHERE open_missing > 0
ORDER BY pop, host, run_id, from_sequence
