-- dyncc report: the newest %(limit)s prefixes reverted to CUBIC in the window, newest first, with
-- the decision's reason text, the prefix's low delivery rate when selected and at the revert,
-- and the trial effect the decision judged (report_reverted_rows.sql says where each comes from).
-- A round re-run at the same time counts once.
-- {{reverted}} is report_reverted_rows.sql; report_reverted_count.sql counts them all.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s, %(limit)s.
SELECT
    toUnixTimestamp(round_time) AS ts,
    pop,
    prefix,
    reason,
    selected_low_rate,
    low_delivery_rate,
    trial_since_ts,
    trial_effect,
    trial_low,
    trial_high
FROM ({{reverted}}) AS r
ORDER BY ts DESC, pop, prefix
LIMIT 1 BY ts, pop, prefix
LIMIT %(limit)s
