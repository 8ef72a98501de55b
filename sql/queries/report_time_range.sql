-- dyncc report: the span of telemetry present (5-minute rollup buckets), for the default window.
-- Parameters: %(pop)s ('' = all POPs).  Empty table: rows = 0.
SELECT
    count() AS rows,
    toUnixTimestamp(min(bucket)) AS first_ts,
    toUnixTimestamp(max(bucket)) AS last_ts
FROM tcpinfo_5m
WHERE (%(pop)s = '' OR pop = %(pop)s)
