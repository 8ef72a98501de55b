-- dyncc report: p10 / p50 delivery rate (bytes/s) of qualifying flows per 5-minute bucket for
-- treated and holdout prefixes, split into before / after each prefix entered its group.
-- Joins the tcpinfo_5m rollup to the group of each (pop, prefix) (report_treatment_groups).
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s.
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
        toUnixTimestamp(bucket) AS ts,
        grp,
        if(toUnixTimestamp(bucket) >= t0_ts, 'after', 'before') AS phase,
        countIfMerge(qualifying) AS qualifying,
        quantilesIfMerge(0.05, 0.1, 0.5)(delivery_rate_qual_q) AS q
    FROM tcpinfo_5m
    ALL INNER JOIN
    (
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
                countIf(decision IN ('select', 'keep')) AS treated_rounds,
                minIf(round_time, decision IN ('select', 'keep')) AS t_treated,
                minIf(round_time, decision = 'holdout') AS t_holdout
            FROM selections
            WHERE (%(pop)s = '' OR pop = %(pop)s)
              AND round_time < %(end)s
              AND decision IN ('select', 'keep', 'holdout')
            GROUP BY pop, prefix
        )
    ) AS groups USING (pop, prefix)
    WHERE (%(pop)s = '' OR pop = %(pop)s)
      AND bucket >= %(start)s AND bucket < %(end)s
    GROUP BY bucket, grp, phase
)
WHERE qualifying > 0
ORDER BY grp, ts
