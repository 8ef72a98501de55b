-- 010: per-prefix trials (controller/evidence/trial.py; owned by the scoring component).
-- A newly selected prefix runs randomised switchback blocks of BBR and CUBIC (selections
-- decision 'trial', algorithm = the block's arm) until the trial's rule keeps or reverts it.
-- One row per round and prefix whose selections row belongs to a trial: in the trial, kept by it
-- (while it stays on BBR, so the trial behind a prefix in force stays known) and reverted by it
-- (that round).  It carries the trial's start, the row's decision and reason, and the effect
-- the round judged: estimate and interval on the effect scale (exp(d) - 1, nan without one).
-- The controller's state joins it to `selections` by (pop, round_id, prefix)
-- (sql/queries/scoring_previous_state.sql); the trials are read from it
-- (sql/queries/evidence_trials.sql).  A table of its own, not columns added to `selections`:
-- ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS, and a replica of an altered replicated
-- table cannot be re-created from the original CREATE on a cluster.
CREATE TABLE IF NOT EXISTS trial_rounds
(
    round_id String,
    round_time DateTime,
    pop {{lowcard(String)}},
    prefix String,
    decision {{lowcard(String)}},
    algorithm {{lowcard(String)}},
    reason String,
    trial_since DateTime,
    trial_effect Float64,
    trial_low Float64,
    trial_high Float64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(round_time)
ORDER BY (pop, round_time, prefix)
{{ttl(round_time + INTERVAL 180 DAY)}};
