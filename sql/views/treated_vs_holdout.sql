-- Grafana panel: Time series (unit: bytes/sec(SI)); one series per group (treated / holdout).
-- $__timeFilter(col) is Grafana's macro, not dyncc's template syntax; dyncc runs this file with it
-- expanded by controller/store/sql.py render_time_filter (as the ClickHouse data source does).
-- p10 delivery rate of qualifying flows per 5 minutes for prefixes the controller moved to BBR
-- (decision 'select'/'keep') and for the holdout control group that stayed on CUBIC, from the
-- rounds whose decisions reached the edges (outcome published / unchanged / legacy in
-- round_outcomes; a rejected or failed round moved nothing).  The gap opening after a config
-- version is the effect of BBR.
-- Grafana ClickHouse data source, Format "Time series": long rows (time, grp, p10).
SELECT
    time,
    grp,
    q[2] AS p10
FROM
(
    SELECT
        bucket AS time,
        grp,
        countIfMerge(qualifying) AS qualifying,
        quantilesIfMerge(0.05, 0.1, 0.5)(delivery_rate_qual_q) AS q
    FROM tcpinfo_5m
    ALL INNER JOIN
    (
        SELECT
            pop,
            prefix,
            if(countIf(decision IN ('select', 'keep')) > 0, 'treated', 'holdout') AS grp
        FROM selections
        WHERE decision IN ('select', 'keep', 'holdout')
          AND (pop, round_id) IN
          (
              SELECT pop, round_id
              FROM round_outcomes
              GROUP BY pop, round_id
              HAVING argMax(status, recorded_ns) IN ('published', 'unchanged', 'legacy')
          )
        GROUP BY pop, prefix
    ) AS groups USING (pop, prefix)
    WHERE $__timeFilter(time)
    GROUP BY time, grp
)
WHERE qualifying > 0
ORDER BY time, grp
