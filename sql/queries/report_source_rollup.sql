-- dyncc report, per-bucket source read from the tcpinfo_5m rollup (5-minute buckets): one row
-- per (ts, pop, prefix) with the rollup's aggregate states, which the section queries merge.
--   ts          bucket start, Unix seconds
--   qual_state  countIf state: qualifying flows (bytes_acked > 100 KB)
--   rate_state  quantilesIf(0.05, 0.1, 0.5) state of delivery_rate over qualifying flows
-- Same columns as report_source_raw.sql; spliced as {{source}} by controller/report/data.py.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s.
SELECT
    toUnixTimestamp(bucket) AS ts,
    pop,
    prefix,
    qualifying AS qual_state,
    delivery_rate_qual_q AS rate_state
FROM tcpinfo_5m
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND bucket >= %(start)s AND bucket < %(end)s
