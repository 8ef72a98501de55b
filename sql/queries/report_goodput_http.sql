-- dyncc report: goodput (bytes_sent / request_time, bytes/s) p10 / p50 per POP per bucket of
-- the request's end, over the requests of {{requests}} (report_http_requests.sql: status 200,
-- > 100 KB, request_time > 0).  quantiles() interpolates linearly between the sorted values
-- (exact up to 8192 requests per POP and bucket, a uniform sample beyond).
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s, %(bucket)s (seconds).
SELECT
    ts,
    pop,
    requests,
    q[1] AS p10,
    q[2] AS p50
FROM
(
    SELECT
        intDiv(ts_s, %(bucket)s) * %(bucket)s AS ts,
        pop,
        count() AS requests,
        quantiles(0.1, 0.5)(goodput) AS q
    FROM ({{requests}}) AS req
    GROUP BY ts, pop
)
ORDER BY pop, ts
