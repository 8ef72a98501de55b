-- dyncc report: config versions to mark on the time plots, one row per (pop, version).
-- Rejected versions were never published and are left out.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s.
SELECT
    pop,
    version,
    toUnixTimestamp(min(created_at)) AS ts,
    max(entries) AS entries,
    max(kill_switch) AS kill_switch
FROM config_versions
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND created_at >= %(start)s AND created_at < %(end)s
  AND lower(status) NOT LIKE 'reject%'
GROUP BY pop, version
ORDER BY pop, ts
