-- Grafana panel: Bar chart (or Time series drawn as bars); one series per POP.
-- Prefixes newly selected for BBR per controller round (decision = 'select'); a steady POP
-- selects few new prefixes per round.
-- Grafana ClickHouse data source, Format "Time series": long rows (time, pop, new_selected).
SELECT
    round_time AS time,
    pop,
    countIf(decision = 'select') AS new_selected
FROM selections
WHERE $__timeFilter(time)
GROUP BY time, pop
ORDER BY time, pop
