-- dyncc report: approximate goodput per flow = bytes_acked / busy_time (µs -> bytes/s) at the
-- flow's last poll, over qualifying flows (bytes_acked > 100 KB, busy_time > 0); p10 / p50 per
-- POP per bucket of the flow's last poll.  Approximate: busy_time counts time the
-- socket had data in flight, not the client's wait; HTTP access-log goodput is the true measure.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s, %(bucket)s (seconds, 300 = 5 minutes).
SELECT
    intDiv(toUnixTimestamp(last_time), %(bucket)s) * %(bucket)s AS ts,
    pop,
    count() AS flows,
    quantile(0.1)(goodput) AS p10,
    quantile(0.5)(goodput) AS p50
FROM
(
    SELECT
        pop,
        max(time) AS last_time,
        argMax(bytes_acked, time_ns) AS acked,
        argMax(busy_time, time_ns) AS busy,
        acked * 1000000. / busy AS goodput
    FROM tcpinfo
    WHERE (%(pop)s = '' OR pop = %(pop)s)
      AND time >= %(start)s AND time < %(end)s
    GROUP BY pop, host, netns, cookie, src_addr, dst_addr, src_port, dst_port
    HAVING acked > 102400 AND busy > 0
)
GROUP BY ts, pop
ORDER BY pop, ts
