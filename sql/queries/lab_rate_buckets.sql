-- dyncc lab summary: per (pop, prefix, bucket of %(bucket)s seconds) the p10 delivery rate
-- (bytes/s) of qualifying samples (bytes_acked > 102400) from raw tcpinfo.
-- Parameters: %(start)s, %(end)s (DateTime), %(bucket)s (seconds).
SELECT
    intDiv(toUnixTimestamp(time), %(bucket)s) * %(bucket)s AS ts,
    pop,
    prefix,
    quantile(0.1)(delivery_rate) AS p10,
    count() AS n
FROM tcpinfo
WHERE time >= %(start)s AND time < %(end)s AND bytes_acked > 102400
GROUP BY ts, pop, prefix
ORDER BY pop, prefix, ts
