-- View delivery_rate_percentiles_by_pop (created by `dyncc schema apply`; README "Views").
-- Delivery rate p5 / p10 / p50 (bytes/s) of qualifying flows (bytes_acked > 100 KB) per POP per
-- 5 minutes, from the tcpinfo_5m rollup; buckets without a qualifying flow are left out.  Pair
-- it with the config_versions_annotations view.
-- Columns: time (5-minute bucket start), pop, p5, p10, p50.
-- No time filter here: the query adds its own on `time`, e.g. Grafana (Time series, one series
-- per POP and percentile, unit bytes/sec(SI)):
--   SELECT time, pop, p5, p10, p50 FROM delivery_rate_percentiles_by_pop
--   WHERE $__timeFilter(time) ORDER BY time, pop
SELECT
    bucket AS time,
    pop,
    quantilesIfMerge(0.05, 0.1, 0.5)(delivery_rate_qual_q)[1] AS p5,
    quantilesIfMerge(0.05, 0.1, 0.5)(delivery_rate_qual_q)[2] AS p10,
    quantilesIfMerge(0.05, 0.1, 0.5)(delivery_rate_qual_q)[3] AS p50
FROM tcpinfo_5m
GROUP BY time, pop
HAVING countIfMerge(qualifying) > 0
