-- dyncc report: share of sockets (poll samples) using a BBR variant per POP per 5-minute bucket.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s.
SELECT
    toUnixTimestamp(toStartOfFiveMinute(time)) AS ts,
    pop,
    count() AS samples,
    countIf(startsWith(cc, 'bbr')) / count() AS bbr_share
FROM tcpinfo
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND time >= %(start)s AND time < %(end)s
GROUP BY ts, pop
ORDER BY pop, ts
