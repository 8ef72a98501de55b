-- dyncc report: share of sockets (poll samples) using a BBR variant per POP per bucket.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s, %(bucket)s (seconds, 300 = 5 minutes).
SELECT
    intDiv(toUnixTimestamp(time), %(bucket)s) * %(bucket)s AS ts,
    pop,
    count() AS samples,
    countIf(startsWith(cc, 'bbr')) / count() AS bbr_share
FROM tcpinfo
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND time >= %(start)s AND time < %(end)s
GROUP BY ts, pop
ORDER BY pop, ts
