-- The selections rows of the rounds holding each POP's state, with the trial columns of the
-- prefixes in a trial or kept by one (trial_rounds, 010; 0 for the others).  {{keys}} =
-- (pop, round_id) tuples, one per POP (bounded by the number of POPs); %(lo)s, %(hi)s bound
-- round_time.  Sorted by pop, prefix (controller/scoring/state.py then need not sort them).
SELECT pop, prefix, decision, selected_since, holdout_since, cooldown_until, last_seen, baseline_low_rate,
    toUInt32(trial_since) AS trial_since, trial_effect, trial_low, trial_high
FROM
(
    SELECT pop, round_id, prefix, decision, toUInt32(selected_since) AS selected_since,
        toUInt32(holdout_since) AS holdout_since, toUInt32(cooldown_until) AS cooldown_until,
        toUInt32(last_seen) AS last_seen, baseline_low_rate
    FROM selections
    WHERE round_time >= %(lo)s AND round_time <= %(hi)s
      AND (pop, round_id) IN ({{keys}})
) AS s
ANY LEFT JOIN
(
    SELECT pop, round_id, prefix, trial_since, trial_effect, trial_low, trial_high
    FROM trial_rounds
    WHERE round_time >= %(lo)s AND round_time <= %(hi)s
      AND (pop, round_id) IN ({{keys}})
) AS t USING (pop, round_id, prefix)
ORDER BY pop, prefix
