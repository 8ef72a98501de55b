-- The selections rows of the rounds holding each POP's state.  {{keys}} = (pop, round_id)
-- tuples, one per POP (bounded by the number of POPs); %(lo)s, %(hi)s bound round_time.
-- Sorted by pop, prefix (controller/scoring/state.py then need not sort them).
SELECT pop, prefix, decision, toUInt32(selected_since) AS selected_since,
    toUInt32(holdout_since) AS holdout_since, toUInt32(cooldown_until) AS cooldown_until,
    toUInt32(last_seen) AS last_seen, baseline_low_rate
FROM selections
WHERE round_time >= %(lo)s AND round_time <= %(hi)s
  AND (pop, round_id) IN ({{keys}})
ORDER BY pop, prefix
