-- Grafana panel: Time series (unit: percent (0.0-1.0), max 1); one series per POP.
-- $__timeFilter(col) is Grafana's macro, not dyncc's template syntax; dyncc runs this file with it
-- expanded by controller/store/sql.py render_time_filter (as the ClickHouse data source does).
-- Share of observed sockets (poll samples) using a BBR variant, per POP per 5 minutes, from the
-- raw tcpinfo table: it rises as configs move prefixes to BBR.
-- Grafana ClickHouse data source, Format "Time series": long rows (time, pop, bbr_share).
SELECT
    t AS time,
    pop,
    bbr_share
FROM
(
    SELECT
        toStartOfFiveMinute(time) AS t,
        pop,
        countIf(startsWith(cc, 'bbr')) / count() AS bbr_share
    FROM tcpinfo
    WHERE $__timeFilter(time)
    GROUP BY t, pop
)
ORDER BY time, pop
