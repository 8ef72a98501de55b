-- dyncc report, raw-table variant of report_isp_low_percentiles: p5 / p10 / p50 delivery rate of
-- qualifying flows per ISP per bucket, from tcpinfo.  %(prefixes)s and %(isps)s are parallel
-- arrays (prefix -> ISP label) from the client-side longest-prefix match.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s, %(bucket)s (seconds), %(prefixes)s, %(isps)s.
SELECT
    ts,
    isp,
    qualifying,
    q[1] AS p5,
    q[2] AS p10,
    q[3] AS p50
FROM
(
    SELECT
        intDiv(toUnixTimestamp(time), %(bucket)s) * %(bucket)s AS ts,
        transform(prefix, %(prefixes)s, %(isps)s, '') AS isp,
        countIf(bytes_acked > 102400) AS qualifying,
        quantilesIf(0.05, 0.1, 0.5)(delivery_rate, bytes_acked > 102400) AS q
    FROM tcpinfo
    WHERE (%(pop)s = '' OR pop = %(pop)s)
      AND time >= %(start)s AND time < %(end)s
      AND has(%(prefixes)s, prefix)
    GROUP BY ts, isp
)
WHERE qualifying > 0
ORDER BY isp, ts
