-- dyncc report: per (pop, prefix) of the data table {{data}} (pop String, prefix String: the
-- prefixes whose trials ran in the window) its latest decision in the window's rounds that
-- count for the trials (sql/queries/evidence_trials.sql: the round's latest round_outcomes row
-- is published, unchanged, legacy or recorded).  A prefix kept by its trial is in force while
-- that decision is 'keep' (controller/report/trials.py); a later revert (no traffic, a denied
-- prefix) ends it without ending the trial's record.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s.
SELECT
    pop,
    prefix,
    argMax(decision, round_time) AS decision,
    toUnixTimestamp(max(round_time)) AS last_ts
FROM selections
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND round_time >= %(start)s AND round_time < %(end)s
  AND (pop, prefix) IN (SELECT pop, prefix FROM {{data}})
  AND (pop, round_id) IN
  (
      SELECT pop, round_id
      FROM round_outcomes
      WHERE (%(pop)s = '' OR pop = %(pop)s) AND round_time >= %(start)s AND round_time < %(end)s
      GROUP BY pop, round_id
      HAVING argMax(status, recorded_ns) IN ('published', 'unchanged', 'legacy', 'recorded')
  )
GROUP BY pop, prefix
ORDER BY pop, prefix
