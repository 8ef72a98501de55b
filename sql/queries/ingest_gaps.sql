-- Batches lost per collector host (sequence gaps within one collector run).
-- Parameters: %(start)s, %(end)s (DateTime literals, poll time of the batch after a gap).
SELECT pop, host, count() AS gaps, sum(gap_missing) AS missing_batches, max(gap_time) AS last_gap
FROM
(
    SELECT pop, host, run_id, from_sequence, any(missing) AS gap_missing, any(time) AS gap_time
    FROM ingest_sequence_gaps
    WHERE time >= %(start)s AND time < %(end)s
    GROUP BY pop, host, run_id, from_sequence
)
GROUP BY pop, host
ORDER BY missing_batches DESC, host
