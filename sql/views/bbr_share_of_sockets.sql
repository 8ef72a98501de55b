-- View bbr_share_of_sockets (created by `dyncc schema apply`; README "Views").
-- Share of observed sockets (poll samples) using a BBR variant, per POP per 5 minutes, from the
-- raw tcpinfo table: it rises as configs move prefixes to BBR.
-- Columns: time (5-minute bucket start), pop, bbr_share (0.0-1.0).
-- No time filter here: the query adds its own on `time`, e.g. Grafana (Time series, one series
-- per POP, unit percent (0.0-1.0)):
--   SELECT time, pop, bbr_share FROM bbr_share_of_sockets WHERE $__timeFilter(time) ORDER BY time, pop
SELECT
    toStartOfFiveMinute(time) AS time,
    pop,
    countIf(startsWith(cc, 'bbr')) / count() AS bbr_share
FROM tcpinfo
GROUP BY time, pop
