-- The arm each trial or watch asked for, per bucket (controller/evidence/switchback.py counts a
-- bucket only where its samples ran the arm asked): per (pop, prefix, start) of the data table
-- {{data}} (pop String, prefix String, since UInt32: the trial's start) the algorithm of each
-- round of the trial or watch (trial_rounds, sql/migrations/010_trials.sql), keyed by the bucket
-- the round fell in (the first round of a bucket governs it).  Only rounds whose decisions count
-- (their latest round_outcomes row is published, unchanged, legacy or recorded).
-- Parameters: %(start)s, %(end)s (DateTime), %(bucket_seconds)s.
SELECT
    pop,
    prefix,
    toUInt32(trial_since) AS since,
    intDiv(toUInt32(round_time), %(bucket_seconds)s) * %(bucket_seconds)s AS ts,
    argMin(algorithm, round_time) AS asked
FROM trial_rounds
WHERE round_time >= %(start)s AND round_time < %(end)s
  AND (pop, prefix, toUInt32(trial_since)) IN (SELECT pop, prefix, since FROM {{data}})
  AND (pop, round_id) IN
  (
      SELECT pop, round_id
      FROM round_outcomes
      WHERE round_time >= %(start)s AND round_time < %(end)s
      GROUP BY pop, round_id
      HAVING argMax(status, recorded_ns) IN ('published', 'unchanged', 'legacy', 'recorded')
  )
GROUP BY pop, prefix, since, ts
ORDER BY pop, prefix, since, ts
