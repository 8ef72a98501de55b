-- dyncc report: goodput p10 / p50 per bucket for treated and holdout prefixes (the groups of
-- {{groups}}, report_treatment_groups.sql), over the requests of {{requests}}
-- (report_http_requests.sql).
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s, %(bucket)s (seconds).
SELECT
    ts,
    grp,
    requests,
    q[1] AS p10,
    q[2] AS p50
FROM
(
    SELECT
        intDiv(ts_s, %(bucket)s) * %(bucket)s AS ts,
        grp,
        count() AS requests,
        quantiles(0.1, 0.5)(goodput) AS q
    FROM ({{requests}}) AS req
    ALL INNER JOIN ({{groups}}) AS groups USING (pop, prefix)
    GROUP BY ts, grp
)
ORDER BY grp, ts
