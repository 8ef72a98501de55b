-- dyncc report: the times of the controller rounds in the window, per POP (one row per round
-- time, whatever became of it), from round_outcomes: one row per round and POP, so this reads
-- far less than selections (a row per prefix).  controller/report/data.py takes the median
-- spacing of consecutive rounds as the bucket length the trials were judged on.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s, %(limit)s (rounds per POP at most).
SELECT
    pop,
    toUnixTimestamp(round_time) AS ts
FROM round_outcomes
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND round_time >= %(start)s AND round_time < %(end)s
GROUP BY pop, round_time
ORDER BY pop, ts
LIMIT %(limit)s BY pop
