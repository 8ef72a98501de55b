-- dyncc report: p5 / p10 / p50 delivery rate of qualifying flows per ISP per bucket.
-- %(prefixes)s and %(isps)s are parallel arrays (prefix -> ISP label) computed client-side by
-- longest-prefix match against the operator's prefix->ASN file; other prefixes are left out.
-- {{source}} is report_source_rollup.sql or report_source_raw.sql.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s, %(bucket)s (raw source only),
-- %(prefixes)s, %(isps)s.
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
        ts,
        transform(prefix, %(prefixes)s, %(isps)s, '') AS isp,
        countIfMerge(qual_state) AS qualifying,
        quantilesIfMerge(0.05, 0.1, 0.5)(rate_state) AS q
    FROM ({{source}}) AS src
    WHERE has(%(prefixes)s, prefix)
    GROUP BY ts, isp
)
WHERE qualifying > 0
ORDER BY isp, ts
