-- 003: controller scoring output (owned by the scoring component).

CREATE TABLE IF NOT EXISTS selections
(
    round_id String,
    round_time DateTime,
    pop {{lowcard(String)}},
    prefix String,
    family UInt8,
    counted_buckets UInt16,
    bad_buckets UInt16,
    transitions UInt16,
    duty_cycle Float64,
    flap_ratio Float64,
    median_delivery_rate Float64,
    median_min_rtt_ms Float64,
    decision {{lowcard(String)}},
    algorithm {{lowcard(String)}},
    reason String
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(round_time)
ORDER BY (pop, round_time, prefix)
{{ttl(round_time + INTERVAL 180 DAY)}};
