-- dyncc report: p10 / p50 delivery rate (bytes/s) of qualifying flows per bucket for treated
-- and holdout prefixes.  %(split)s = 0: the time series per (ts, grp), phase ''; %(split)s = 1:
-- also split into phase 'before' / 'after' the bucket in which each prefix entered its group.
-- {{source}} is report_source_rollup.sql or report_source_raw.sql; {{groups}} is
-- report_treatment_groups.sql (the group and t0 of each (pop, prefix)).
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s, %(bucket)s (raw source only), %(split)s.
SELECT
    ts,
    grp,
    phase,
    qualifying,
    q[2] AS p10,
    q[3] AS p50
FROM
(
    SELECT
        ts,
        grp,
        multiIf(%(split)s = 0, '', ts >= t0_ts, 'after', 'before') AS phase,
        countIfMerge(qual_state) AS qualifying,
        quantilesIfMerge(0.05, 0.1, 0.5)(rate_state) AS q
    FROM ({{source}}) AS src
    ALL INNER JOIN ({{groups}}) AS groups USING (pop, prefix)
    GROUP BY ts, grp, phase
)
WHERE qualifying > 0
ORDER BY grp, ts
