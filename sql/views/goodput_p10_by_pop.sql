-- View goodput_p10_by_pop (created by `dyncc schema apply`; README "Views").
-- APPROXIMATE p10 goodput (bytes/s) per POP per 5 minutes: bytes_acked / busy_time (µs) of each
-- qualifying flow (> 100 KB) at its last poll in the bucket (a flow polled in several buckets
-- counts in each, with what it had acked by then).  busy_time is the time the socket had data in
-- flight, not what the client waited; HTTP access-log goodput is the true measure.
-- Columns: time (5-minute bucket start), pop, p10_goodput.
-- No time filter here: the query adds its own on `time`, e.g. Grafana (Time series, one series
-- per POP, unit bytes/sec(SI)):
--   SELECT time, pop, p10_goodput FROM goodput_p10_by_pop WHERE $__timeFilter(time) ORDER BY time, pop
SELECT
    time,
    pop,
    quantile(0.1)(goodput) AS p10_goodput
FROM
(
    SELECT
        toStartOfFiveMinute(time) AS time,
        pop,
        argMax(bytes_acked, time_ns) AS acked,
        argMax(busy_time, time_ns) AS busy,
        acked * 1000000. / busy AS goodput
    FROM tcpinfo
    GROUP BY time, pop, host, netns, cookie, src_addr, dst_addr, src_port, dst_port
    HAVING acked > 102400 AND busy > 0
)
GROUP BY time, pop
