-- dyncc report, raw-table variant of report_delivery_by_pop (finer buckets for short windows,
-- e.g. an accelerated lab): delivery-rate p5/p10/p50 (bytes/s) of qualifying flows (bytes_acked
-- > 100 KB) per POP per bucket, computed from tcpinfo.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s, %(bucket)s (seconds).
SELECT
    ts,
    pop,
    qualifying,
    q[1] AS p5,
    q[2] AS p10,
    q[3] AS p50
FROM
(
    SELECT
        intDiv(toUnixTimestamp(time), %(bucket)s) * %(bucket)s AS ts,
        pop,
        countIf(bytes_acked > 102400) AS qualifying,
        quantilesIf(0.05, 0.1, 0.5)(delivery_rate, bytes_acked > 102400) AS q
    FROM tcpinfo
    WHERE (%(pop)s = '' OR pop = %(pop)s)
      AND time >= %(start)s AND time < %(end)s
    GROUP BY ts, pop
)
WHERE qualifying > 0
ORDER BY pop, ts
