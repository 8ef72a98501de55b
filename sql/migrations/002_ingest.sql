-- 002: ingest bookkeeping (owned by the ingest component).

CREATE TABLE IF NOT EXISTS ingest_dead_letter
(
    time DateTime,
    topic String,
    partition Int32,
    offset Int64,
    error String,
    raw String
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(time)
ORDER BY (time, topic, partition, offset)
{{ttl(time + INTERVAL 30 DAY)}};
