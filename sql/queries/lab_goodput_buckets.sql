-- dyncc lab summary: per (pop, prefix, bucket of %(bucket)s seconds) the p10 goodput
-- (bytes_sent / request_time, bytes/s) of HTTP 200 responses above 1 MiB from http_requests (the
-- report's goodput definition: sql/queries/report_http_requests.sql says why 1 MiB).
-- Parameters: %(start)s, %(end)s (DateTime), %(bucket)s (seconds).
SELECT
    intDiv(toUnixTimestamp(time), %(bucket)s) * %(bucket)s AS ts,
    pop,
    prefix,
    quantile(0.1)(bytes_sent / request_time) AS p10,
    count() AS n
FROM http_requests
WHERE time >= %(start)s AND time < %(end)s
  AND status = 200 AND bytes_sent > 1048576 AND request_time > 0
GROUP BY ts, pop, prefix
ORDER BY pop, prefix, ts
