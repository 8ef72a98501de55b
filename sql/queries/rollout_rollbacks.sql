-- The staged rollout's rollbacks: the rollout_waves rows of event rollback (the stable entries
-- re-published POP-wide) or rollback_rejected (that config failed validation), of every POP,
-- with updated_ns in [%(since_ns)s, %(until_ns)s), oldest first.
SELECT
    pop, phase, event, rollout_id, stable_version, candidate_version, wave_version, wave_hosts,
    wave_started_ns, candidate_fingerprint, failed_fingerprint, failed_at_ns, reason, updated_ns
FROM rollout_waves
WHERE event IN ('rollback', 'rollback_rejected')
  AND updated_ns >= %(since_ns)s AND updated_ns < %(until_ns)s
ORDER BY updated_ns, pop
