-- 004: config versions and agent apply reports (owned by the rollout component).

CREATE TABLE IF NOT EXISTS config_versions
(
    created_at DateTime,
    pop {{lowcard(String)}},
    version UInt64,
    round_id String,
    status {{lowcard(String)}},
    entries UInt32,
    added UInt32,
    removed UInt32,
    reasons Array(String),
    kill_switch UInt8,
    config String
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(created_at)
ORDER BY (pop, version, created_at);

CREATE TABLE IF NOT EXISTS apply_status
(
    received_at DateTime,
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
    tcp_sockets UInt64,
    available_cc Array(String),
    owned_routes UInt32
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(received_at)
ORDER BY (pop, host, received_at);
