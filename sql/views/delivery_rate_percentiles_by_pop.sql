-- Grafana panel: Time series (unit: bytes/sec(SI)); one series per POP and percentile.
-- $__timeFilter(col) is Grafana's macro, not dyncc's template syntax; dyncc runs this file with it
-- expanded by controller/store/sql.py render_time_filter (as the ClickHouse data source does).
-- Delivery rate p5 / p10 / p50 of qualifying flows (bytes_acked > 100 KB) per POP per 5 minutes,
-- from the tcpinfo_5m rollup.  Pair it with the config_versions_annotations.sql annotation.
-- Grafana ClickHouse data source, Format "Time series": long rows (time, pop, values).
SELECT
    time,
    pop,
    q[1] AS p5,
    q[2] AS p10,
    q[3] AS p50
FROM
(
    SELECT
        bucket AS time,
        pop,
        countIfMerge(qualifying) AS qualifying,
        quantilesIfMerge(0.05, 0.1, 0.5)(delivery_rate_qual_q) AS q
    FROM tcpinfo_5m
    WHERE $__timeFilter(time)
    GROUP BY time, pop
)
WHERE qualifying > 0
ORDER BY time, pop
