-- The effect model's goodput input: per (pop, prefix, bucket) the number of responses that count
-- for goodput (status 200, bytes_sent > 1 MiB, request_time > 0: sql/queries/report_http_requests.sql
-- says why 1 MiB) and their p10 goodput (bytes_sent / request_time, bytes/s), for the (pop,
-- prefix)s of the data table {{data}} (pop String, prefix String), and the mean and sample variance of
-- ln(goodput) over them (controller/evidence/switchback.py).  A request belongs to the
-- bucket of its end.  Access logs do not know the congestion control: controller/evidence/load.py
-- gives each bucket the arm the same prefix's tcpinfo samples ran in that bucket.
-- Parameters: %(start)s, %(end)s (DateTime), %(bucket_seconds)s.
SELECT
    pop,
    prefix,
    intDiv(toUInt32(time), %(bucket_seconds)s) * %(bucket_seconds)s AS ts,
    toUInt64(count()) AS samples,
    quantile(0.1)(bytes_sent / request_time) AS value,
    avg(log(bytes_sent / request_time)) AS mean_log,
    varSamp(log(bytes_sent / request_time)) AS var_log
FROM http_requests
WHERE time >= %(start)s AND time < %(end)s
  AND status = 200 AND bytes_sent > 1048576 AND request_time > 0
  AND (pop, prefix) IN (SELECT pop, prefix FROM {{data}})
GROUP BY pop, prefix, ts
ORDER BY pop, prefix, ts
