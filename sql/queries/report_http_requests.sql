-- dyncc report, per-request goodput rows from http_requests (the edge web servers' access logs),
-- spliced as {{requests}} by controller/report/data.py.  Only responses that count for goodput:
-- status 200, bytes_sent > 1 MiB (1048576) and request_time > 0; a request belongs to the window
-- by its end time.  Not the seed's 100 KB: nginx logs a request when its last byte is written to
-- the socket, not when it is delivered, so about one congestion window of a response is not in
-- its request_time; that error is large for responses of a few hundred KB and small above 1 MiB
-- (docs/report.md).
--   ts_s      request end, whole Unix seconds (the bucket of the request)
--   end_s     request end, Unix seconds with milliseconds (time + time_ms)
--   start_s   request start: end_s - request_time
--   goodput   bytes_sent / request_time, bytes/s
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s.
SELECT
    pop,
    prefix,
    toUnixTimestamp(time) AS ts_s,
    ts_s + time_ms / 1000. AS end_s,
    end_s - request_time AS start_s,
    bytes_sent / request_time AS goodput
FROM http_requests
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND time >= %(start)s AND time < %(end)s
  AND status = 200 AND bytes_sent > 1048576 AND request_time > 0
