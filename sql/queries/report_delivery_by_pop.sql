-- dyncc report: delivery-rate p5/p10/p50 (bytes/s) of qualifying flows (bytes_acked > 100 KB)
-- per POP per 5-minute bucket, merged from the tcpinfo_5m rollup.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s.
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
        toUnixTimestamp(bucket) AS ts,
        pop,
        countIfMerge(qualifying) AS qualifying,
        quantilesIfMerge(0.05, 0.1, 0.5)(delivery_rate_qual_q) AS q
    FROM tcpinfo_5m
    WHERE (%(pop)s = '' OR pop = %(pop)s)
      AND bucket >= %(start)s AND bucket < %(end)s
    GROUP BY bucket, pop
)
WHERE qualifying > 0
ORDER BY pop, ts
