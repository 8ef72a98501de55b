-- The bucket lengths the controller's rounds recorded in a window (round_settings,
-- sql/migrations/011_round_settings.sql): per length, how many (round, POP) rows used it and the
-- latest of them.  The report and the lab's summary judge the trials in buckets of the length
-- most rounds used, the latest on a tie (controller/evidence/load.py `recorded_bucket`).
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s (DateTime).
SELECT
    bucket_seconds,
    count() AS rounds,
    max(round_time_ns) AS last_ns
FROM round_settings
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND round_time >= %(start)s AND round_time < %(end)s
GROUP BY bucket_seconds
ORDER BY rounds DESC, last_ns DESC
