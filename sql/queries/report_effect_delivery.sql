-- dyncc report, input of the difference in differences of p10 delivery rate
-- (controller/report/effects.py): per treated or holdout prefix ({{groups}},
-- report_treatment_groups.sql) and phase, the qualifying samples (`samples`: polls of flows
-- > 100 KB) and the prefix's p10 delivery rate (`value`, bytes/s), merged from the per-bucket
-- states of {{source}} (report_source_rollup.sql or report_source_raw.sql).
-- Phase: 'before' = the bucket ended by the time the prefix entered its group (t0), 'after' =
-- it started at or after t0; the bucket holding t0 counts in neither.
-- One row per (pop, prefix, phase): the result grows with the prefixes, the query text does not.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s, %(bucket)s (the bucket length in seconds,
-- 300 for the rollup).
SELECT
    pop,
    prefix,
    grp,
    phase,
    samples,
    q[2] AS value
FROM
(
    SELECT
        pop,
        prefix,
        grp,
        multiIf(ts >= t0_ts, 'after', ts + %(bucket)s <= t0_ts, 'before', '') AS phase,
        countIfMerge(qual_state) AS samples,
        quantilesIfMerge(0.05, 0.1, 0.5)(rate_state) AS q
    FROM ({{source}}) AS src
    ALL INNER JOIN ({{groups}}) AS groups USING (pop, prefix)
    GROUP BY pop, prefix, grp, phase
)
WHERE phase != '' AND samples > 0
ORDER BY pop, prefix, phase
