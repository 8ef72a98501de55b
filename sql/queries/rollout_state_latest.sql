-- The current rollout state of a POP: its latest rollout_waves row.
SELECT
    pop, phase, event, rollout_id, stable_version, candidate_version, wave_version, wave_hosts,
    wave_started_ns, candidate_fingerprint, failed_fingerprint, failed_at_ns, reason, updated_ns
FROM rollout_waves
WHERE pop = %(pop)s
ORDER BY updated_ns DESC
LIMIT 1
