-- dyncc report: per round and POP, prefixes newly selected for BBR (decision 'select'),
-- all on BBR this round ('select' or 'keep') and held out as the control group ('holdout').
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s.
SELECT
    toUnixTimestamp(round_time) AS ts,
    pop,
    any(round_id) AS round_id,
    countIf(decision = 'select') AS new_selected,
    countIf(decision IN ('select', 'keep')) AS on_bbr,
    countIf(decision = 'holdout') AS holdout
FROM selections
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND round_time >= %(start)s AND round_time < %(end)s
GROUP BY round_time, pop
ORDER BY pop, ts
