-- 004: config versions, agent apply reports and rollout state (owned by the rollout component).
-- All three tables are append-only logs (no UPDATE on ClickHouse 18.16): the current state
-- is the latest row by its *_ns column.

-- One row per generated config: published (sent to Kafka / written to --publish-dir),
-- rejected by validation (never published; `reasons` says why) or publish_failed.
-- `kind`: canary | promote | full | rollback | kill_switch.  `config` is the base64 of the
-- serialized (signed, when published) CongestionConfig.
CREATE TABLE IF NOT EXISTS config_versions
(
    created_at DateTime,
    created_ns UInt64,
    pop {{lowcard(String)}},
    version UInt64,
    round_id String,
    status {{lowcard(String)}},
    kind {{lowcard(String)}},
    target_hosts Array(String),
    entries UInt32,
    added UInt32,
    removed UInt32,
    changed UInt32,
    reasons Array(String),
    kill_switch UInt8,
    fingerprint String,
    key_id String,
    config String
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(created_at)
ORDER BY (pop, version, created_ns);

-- One row per ApplyStatus read from the status topic.  reported_ns is the agent's
-- reported_at_ns (or the Kafka message time when the agent left it 0).
CREATE TABLE IF NOT EXISTS apply_status
(
    received_at DateTime,
    received_ns UInt64,
    reported_ns UInt64,
    host {{lowcard(String)}},
    pop {{lowcard(String)}},
    version UInt64,
    applied_version UInt64,
    result {{lowcard(String)}},
    routes_added UInt32,
    routes_removed UInt32,
    routes_kept UInt32,
    errors Array(String),
    mem_available_bytes UInt64,
    load1 Float64,
    load5 Float64,
    tcp_sockets UInt64,
    available_cc Array(String),
    owned_routes UInt32
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(received_at)
ORDER BY (pop, host, received_ns);

-- Rollout state machine, one row per transition; the latest row (by updated_ns) of a POP
-- is its state, so a restarted controller continues where it stopped.
-- phase: idle | canary | rest | killed.  event: what produced the row.
CREATE TABLE IF NOT EXISTS rollout_waves
(
    updated_at DateTime,
    updated_ns UInt64,
    pop {{lowcard(String)}},
    rollout_id String,
    phase {{lowcard(String)}},
    event {{lowcard(String)}},
    stable_version UInt64,
    candidate_version UInt64,
    wave_version UInt64,
    wave_hosts Array(String),
    wave_started_ns UInt64,
    candidate_fingerprint String,
    failed_fingerprint String,
    failed_at_ns UInt64,
    reason String
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(updated_at)
ORDER BY (pop, updated_ns);
