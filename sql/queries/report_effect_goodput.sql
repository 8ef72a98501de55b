-- dyncc report, input of the difference in differences of p10 goodput
-- (controller/report/effects.py): per treated or holdout prefix ({{groups}},
-- report_treatment_groups.sql) and phase, the number of requests (`samples`) and the prefix's
-- p10 goodput (`value`) over the requests of {{requests}} (report_http_requests.sql).
-- Phase: 'before' = the request ended before the prefix entered its group (t0), 'after' = it
-- started at or after t0; a request spanning t0 counts in neither.
-- One row per (pop, prefix, phase): the result grows with the prefixes, the query text does not.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s.
SELECT
    pop,
    prefix,
    grp,
    phase,
    samples,
    value
FROM
(
    SELECT
        pop,
        prefix,
        grp,
        multiIf(start_s >= t0_ts, 'after', end_s < t0_ts, 'before', '') AS phase,
        count() AS samples,
        quantile(0.1)(goodput) AS value
    FROM ({{requests}}) AS req
    ALL INNER JOIN ({{groups}}) AS groups USING (pop, prefix)
    GROUP BY pop, prefix, grp, phase
)
WHERE phase != ''
ORDER BY pop, prefix, phase
