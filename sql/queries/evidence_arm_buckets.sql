-- The effect model's input (controller/evidence/switchback.py): per (pop, prefix, bucket, arm) the
-- qualifying samples (bytes_acked > %(min_bytes)s, a delivery rate above 0), their p10 delivery
-- rate (bytes/s) and the mean and sample variance of ln(delivery rate) (every sample once), for the
-- (pop, prefix)s of the data table {{data}} (pop String, prefix String) only, from raw tcpinfo.
-- arm = the socket's own congestion control as collected ('bbr' for any bbr version, 'cubic',
-- else 'other'), never the config.  App-limited samples (tcp_info's delivery_rate_app_limited:
-- the rate says how fast the server had data, not what the path carries) are left out unless
-- %(include_app_limited)s = 1; `app_limited_samples` counts the qualifying app-limited ones, so
-- a report can show the share.  One row per (pop, prefix, bucket, arm): the statement does not
-- grow with the prefixes (they travel as data).
-- Parameters: %(start)s, %(end)s (DateTime), %(bucket_seconds)s, %(min_bytes)s,
-- %(include_app_limited)s (0 or 1).
SELECT
    pop,
    prefix,
    intDiv(toUInt32(time), %(bucket_seconds)s) * %(bucket_seconds)s AS ts,
    multiIf(startsWith(cc, 'bbr'), 'bbr', cc = 'cubic', 'cubic', 'other') AS arm,
    toUInt64(countIf(app_limited = 0 OR %(include_app_limited)s = 1)) AS samples,
    quantileIf(0.1)(delivery_rate, app_limited = 0 OR %(include_app_limited)s = 1) AS value,
    toUInt64(countIf(app_limited != 0)) AS app_limited_samples,
    avgIf(log(delivery_rate), app_limited = 0 OR %(include_app_limited)s = 1) AS mean_log,
    varSampIf(log(delivery_rate), app_limited = 0 OR %(include_app_limited)s = 1) AS var_log
FROM tcpinfo
WHERE time >= %(start)s AND time < %(end)s
  AND bytes_acked > %(min_bytes)s AND delivery_rate > 0
  AND (pop, prefix) IN (SELECT pop, prefix FROM {{data}})
GROUP BY pop, prefix, ts, arm
ORDER BY pop, prefix, ts, arm
