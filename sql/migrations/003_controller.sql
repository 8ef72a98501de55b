-- 003: controller scoring (owned by the scoring component).

-- One row per prefix and round: every scored prefix, plus every prefix carrying
-- state (on BBR, holdout, cooldown) even when it had no data in the window.
-- The rows of a POP's latest round are the controller's state (see
-- controller/scoring/state.py).  Times are UTC; DateTime 0 means "not set".
CREATE TABLE IF NOT EXISTS selections
(
    round_id String,
    round_time DateTime,
    round_time_ns UInt64,
    pop {{lowcard(String)}},
    prefix String,
    family UInt8,
    samples UInt64,
    qualifying UInt64,
    counted_buckets UInt16,
    bad_buckets UInt16,
    transitions UInt16,
    duty_cycle Float64,
    flap_ratio Float64,
    median_delivery_rate Float64,
    low_delivery_rate Float64,
    median_min_rtt_ms Float64,
    decision {{lowcard(String)}},
    algorithm {{lowcard(String)}},
    reason String,
    holdout UInt8,
    selected_since DateTime,
    holdout_since DateTime,
    cooldown_until DateTime,
    last_seen DateTime,
    baseline_low_rate Float64,
    effect Float64,
    holdout_effect Float64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(round_time)
ORDER BY (pop, round_time, prefix)
{{ttl(round_time + INTERVAL 180 DAY)}};

-- Cache of per-(pop, bucket, prefix) statistics computed from the rollup (or raw
-- tcpinfo for non-default definitions, `source` names which).  A (pop, bucket) is
-- recomputed when its sample count in the source changed (late data), and tagged
-- with a new `version` (recorded in scoring_versions); readers take the newest.
CREATE TABLE IF NOT EXISTS scoring_buckets
(
    pop {{lowcard(String)}},
    source {{lowcard(String)}},
    bucket DateTime,
    version UInt64,
    prefix String,
    family UInt8,
    samples UInt64,
    qualifying UInt64,
    stat Float64,
    low Float64,
    rtt Float64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(bucket)
ORDER BY (pop, source, bucket, version, prefix)
{{ttl(bucket + INTERVAL 3 DAY)}};

-- Which version of each (pop, bucket) the scoring_buckets cache holds, and the
-- source's sample count it was computed from (0 = the source had no data then).
-- One row per refresh of a bucket: the newest version is current.
CREATE TABLE IF NOT EXISTS scoring_versions
(
    pop {{lowcard(String)}},
    source {{lowcard(String)}},
    bucket DateTime,
    version UInt64,
    samples UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(bucket)
ORDER BY (source, pop, bucket, version)
{{ttl(bucket + INTERVAL 3 DAY)}};
