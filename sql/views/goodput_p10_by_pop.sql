-- Grafana panel: Time series (unit: bytes/sec(SI)); one series per POP.
-- $__timeFilter(col) is Grafana's macro, not dyncc's template syntax; dyncc runs this file with it
-- expanded by controller/store/sql.py render_time_filter (as the ClickHouse data source does).
-- APPROXIMATE p10 goodput: bytes_acked / busy_time (µs) of each qualifying flow (> 100 KB) at its
-- last poll, per POP per 5 minutes.  busy_time is the time the socket had data in flight, not
-- what the client waited; HTTP access-log goodput is the true measure.
-- Grafana ClickHouse data source, Format "Time series": long rows (time, pop, p10_goodput).
SELECT
    t AS time,
    pop,
    p10_goodput
FROM
(
    SELECT
        toStartOfFiveMinute(last_time) AS t,
        pop,
        quantile(0.1)(goodput) AS p10_goodput
    FROM
    (
        SELECT
            pop,
            max(time) AS last_time,
            argMax(bytes_acked, time_ns) AS acked,
            argMax(busy_time, time_ns) AS busy,
            acked * 1000000. / busy AS goodput
        FROM tcpinfo
        WHERE $__timeFilter(time)
        GROUP BY pop, host, netns, cookie, src_addr, dst_addr, src_port, dst_port
        HAVING acked > 102400 AND busy > 0
    )
    GROUP BY t, pop
)
ORDER BY time, pop
