-- dyncc report, the revert decisions in the window (spliced as {{reverted}}): rounds whose
-- decisions reached the edges only (the round's latest round_outcomes row is published,
-- unchanged or legacy), as in report_treatment_groups.sql.
-- selected_low_rate: the prefix's low delivery rate when it was selected.  The controller clears
-- baseline_low_rate on a revert row but keeps effect = low_delivery_rate / that baseline
-- (controller/scoring/decide.py), so the baseline is low_delivery_rate / effect; rows that still
-- carry a baseline (older rows) give it as it is.  nan when neither is known (a prefix reverted
-- for lack of traffic has no current rate).
-- trial_since_ts / trial_effect / trial_low / trial_high: the trial the revert ended and the
-- effect its deciding round judged, from the revert's trial_rounds row (010); a revert that
-- ended no trial has none: trial_since_ts 0.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s.
SELECT
    round_time,
    pop,
    prefix,
    reason,
    selected_low_rate,
    low_delivery_rate,
    toUnixTimestamp(trial_since) AS trial_since_ts,
    trial_effect,
    trial_low,
    trial_high
FROM
(
    SELECT
        round_time,
        pop,
        round_id,
        prefix,
        reason,
        if(baseline_low_rate > 0, baseline_low_rate,
           if(effect > 0 AND low_delivery_rate > 0, low_delivery_rate / effect, nan)) AS selected_low_rate,
        low_delivery_rate
    FROM selections
    WHERE (%(pop)s = '' OR pop = %(pop)s)
      AND round_time >= %(start)s AND round_time < %(end)s
      AND decision = 'revert'
      AND (pop, round_id) IN
      (
          SELECT pop, round_id
          FROM round_outcomes
          WHERE (%(pop)s = '' OR pop = %(pop)s) AND round_time >= %(start)s AND round_time < %(end)s
          GROUP BY pop, round_id
          HAVING argMax(status, recorded_ns) IN ('published', 'unchanged', 'legacy')
      )
) AS decisions
ANY LEFT JOIN
(
    SELECT pop, round_id, prefix, trial_since, trial_effect, trial_low, trial_high
    FROM trial_rounds
    WHERE (%(pop)s = '' OR pop = %(pop)s)
      AND round_time >= %(start)s AND round_time < %(end)s
      AND decision = 'revert'
) AS trials USING (pop, round_id, prefix)
