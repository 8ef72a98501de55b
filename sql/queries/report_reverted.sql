-- dyncc report: the newest %(limit)s prefixes reverted to CUBIC in the window, newest first, with
-- the decision's reason text and effect numbers (controller/scoring/decide.py): effect = the
-- prefix's low delivery rate at the revert / at its selection (baseline_low_rate), holdout_effect
-- = the POP's holdout change then.  A round re-run at the same time counts once.
-- {{reverted}} is report_reverted_rows.sql; report_reverted_count.sql counts them all.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s, %(limit)s.
SELECT
    toUnixTimestamp(round_time) AS ts,
    pop,
    prefix,
    reason,
    effect,
    holdout_effect,
    baseline_low_rate,
    low_delivery_rate
FROM ({{reverted}}) AS r
ORDER BY ts DESC, pop, prefix
LIMIT 1 BY ts, pop, prefix
LIMIT %(limit)s
