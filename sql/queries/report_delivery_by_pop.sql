-- dyncc report: delivery-rate p5/p10/p50 (bytes/s) of qualifying flows (bytes_acked > 100 KB)
-- per POP per bucket.  {{source}} is report_source_rollup.sql or report_source_raw.sql.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s, %(bucket)s (raw source only).
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
        ts,
        pop,
        countIfMerge(qual_state) AS qualifying,
        quantilesIfMerge(0.05, 0.1, 0.5)(rate_state) AS q
    FROM ({{source}}) AS src
    GROUP BY ts, pop
)
WHERE qualifying > 0
ORDER BY pop, ts
