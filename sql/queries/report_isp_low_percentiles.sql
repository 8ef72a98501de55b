-- dyncc report: p5 / p10 / p50 delivery rate of qualifying flows per ISP per 5-minute bucket.
-- %(prefixes)s and %(isps)s are parallel arrays (prefix -> ISP label) computed client-side by
-- longest-prefix match against the operator's prefix->ASN file; other prefixes are left out.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s, %(prefixes)s, %(isps)s.
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
        toUnixTimestamp(bucket) AS ts,
        transform(prefix, %(prefixes)s, %(isps)s, '') AS isp,
        countIfMerge(qualifying) AS qualifying,
        quantilesIfMerge(0.05, 0.1, 0.5)(delivery_rate_qual_q) AS q
    FROM tcpinfo_5m
    WHERE (%(pop)s = '' OR pop = %(pop)s)
      AND bucket >= %(start)s AND bucket < %(end)s
      AND has(%(prefixes)s, prefix)
    GROUP BY bucket, isp
)
WHERE qualifying > 0
ORDER BY isp, ts
