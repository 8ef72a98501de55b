-- dyncc report: the treated (assigned to BBR: 'select', 'keep' or a 'trial' of switchback
-- blocks) and holdout prefixes per POP, with the time each entered its group (t0: first such
-- round up to %(end)s).  A prefix that was ever treated counts as treated (intent to treat: a
-- trial's CUBIC blocks and a revert stay in the treated group).  Only rounds whose decisions reached the edges count: the
-- round's outcome (its latest round_outcomes row) is published, unchanged or legacy; a rejected,
-- failed or held round changed nothing on the edges.
-- Parameters: %(pop)s ('' = all), %(end)s.
SELECT
    pop,
    prefix,
    if(treated_rounds > 0, 'treated', 'holdout') AS grp,
    toUnixTimestamp(if(treated_rounds > 0, t_treated, t_holdout)) AS t0_ts
FROM
(
    SELECT
        pop,
        prefix,
        countIf(decision IN ('select', 'keep', 'trial')) AS treated_rounds,
        minIf(round_time, decision IN ('select', 'keep', 'trial')) AS t_treated,
        minIf(round_time, decision = 'holdout') AS t_holdout
    FROM selections
    WHERE (%(pop)s = '' OR pop = %(pop)s)
      AND round_time < %(end)s
      AND decision IN ('select', 'keep', 'trial', 'holdout')
      AND (pop, round_id) IN
      (
          SELECT pop, round_id
          FROM round_outcomes
          WHERE (%(pop)s = '' OR pop = %(pop)s) AND round_time < %(end)s
          GROUP BY pop, round_id
          HAVING argMax(status, recorded_ns) IN ('published', 'unchanged', 'legacy')
      )
    GROUP BY pop, prefix
)
ORDER BY pop, grp, prefix
