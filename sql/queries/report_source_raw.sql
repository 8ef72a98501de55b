-- dyncc report, per-bucket source computed from raw tcpinfo in buckets of %(bucket)s seconds
-- (finer than the rollup, for short windows such as an accelerated lab): the same aggregate
-- states as the tcpinfo_5m materialized view builds, per (ts, pop, prefix).
-- Same columns as report_source_rollup.sql; spliced as {{source}} by controller/report/data.py.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s, %(bucket)s (seconds).
SELECT
    intDiv(toUnixTimestamp(time), %(bucket)s) * %(bucket)s AS ts,
    pop,
    prefix,
    countIfState(bytes_acked > 102400) AS qual_state,
    quantilesIfState(0.05, 0.1, 0.5)(delivery_rate, bytes_acked > 102400) AS rate_state
FROM tcpinfo
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND time >= %(start)s AND time < %(end)s
GROUP BY ts, pop, prefix
