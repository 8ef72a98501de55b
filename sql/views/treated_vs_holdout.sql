-- View treated_vs_holdout (created by `dyncc schema apply`; README "Views").
-- p10 delivery rate (bytes/s) of qualifying flows per 5 minutes for prefixes the controller moved
-- to BBR (decision 'select'/'keep') and for the holdout control group that stayed on CUBIC, from
-- the rounds whose decisions reached the edges (outcome published / unchanged / legacy in
-- round_outcomes; a rejected or failed round moved nothing).  The gap opening after a config
-- version is the effect of BBR.
-- Columns: time (5-minute bucket start), grp (treated / holdout), p10.
-- No time filter here: the query adds its own on `time`, e.g. Grafana (Time series, one series
-- per group, unit bytes/sec(SI)):
--   SELECT time, grp, p10 FROM treated_vs_holdout WHERE $__timeFilter(time) ORDER BY time, grp
SELECT
    bucket AS time,
    grp,
    quantilesIfMerge(0.05, 0.1, 0.5)(delivery_rate_qual_q)[2] AS p10
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
GROUP BY time, grp
HAVING countIfMerge(qualifying) > 0
