-- The POPs with any rollout data: waves, config versions or apply statuses.
SELECT DISTINCT pop FROM rollout_waves
UNION ALL SELECT DISTINCT pop FROM config_versions
UNION ALL SELECT DISTINCT pop FROM apply_status
