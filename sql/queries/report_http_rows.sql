-- dyncc report: access-log rows (any status or size) per POP in the window.  No row at all
-- means the goodput section falls back to the busy_time approximation (report_goodput.sql).
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s.
SELECT
    pop,
    count() AS requests
FROM http_requests
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND time >= %(start)s AND time < %(end)s
GROUP BY pop
ORDER BY pop
