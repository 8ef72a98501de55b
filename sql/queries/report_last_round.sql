-- dyncc report: the latest controller round recorded for the POP ('' = all), so the default
-- window ends after it: a round at the boundary of the last telemetry bucket (the lab's last
-- round) still counts, as it does for the lab's summary.  No round: rows = 0.
-- Parameters: %(pop)s.
SELECT
    count() AS rows,
    toUnixTimestamp(max(round_time)) AS last_ts
FROM round_outcomes
WHERE (%(pop)s = '' OR pop = %(pop)s)
