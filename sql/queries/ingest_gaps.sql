-- Batches lost per collector host: the sequence gaps within one collector run that are still
-- open.  A batch that arrived late (ingest_gap_fills) closes its place in its gap; a gap whose
-- places are all filled is not counted, and missing_batches counts the places still empty.
-- Parameters: %(start)s, %(end)s (DateTime literals, poll time of the batch after a gap).
SELECT pop, host, count() AS gaps, sum(open_missing) AS missing_batches, max(gap_time) AS last_gap
FROM
(
    SELECT pop, host, greatest(gap_missing, filled) - filled AS open_missing, gap_time
    FROM
    (
        SELECT pop, host, run_id, from_sequence, any(missing) AS gap_missing, any(time) AS gap_time
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
GROUP BY pop, host
ORDER BY missing_batches DESC, host
