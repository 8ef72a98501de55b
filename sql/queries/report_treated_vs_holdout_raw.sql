-- dyncc report, raw-table variant of report_treated_vs_holdout: p10 / p50 delivery rate of
-- qualifying flows per bucket for treated and holdout prefixes, split into before / after each
-- prefix entered its group, from tcpinfo.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s, %(bucket)s (seconds).
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
        intDiv(toUnixTimestamp(time), %(bucket)s) * %(bucket)s AS ts,
        grp,
        if(toUnixTimestamp(time) >= t0_ts, 'after', 'before') AS phase,
        countIf(bytes_acked > 102400) AS qualifying,
        quantilesIf(0.05, 0.1, 0.5)(delivery_rate, bytes_acked > 102400) AS q
    FROM tcpinfo
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
      AND time >= %(start)s AND time < %(end)s
    GROUP BY ts, grp, phase
)
WHERE qualifying > 0
ORDER BY grp, ts
