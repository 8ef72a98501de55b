-- 002: ingest bookkeeping (owned by the ingest component; see docs/ingest.md).

-- Messages that could not be loaded: raw bytes, the reason, where they came
-- from (Kafka topic/partition/offset, or file path / -1 / byte offset).  A
-- message redelivered after a crash is dead-lettered again; the Replacing
-- engine keeps one row per (topic, partition, offset) after merges.
CREATE TABLE IF NOT EXISTS ingest_dead_letter
(
    time DateTime,
    topic String,
    partition Int32,
    offset Int64,
    error String,
    raw String
)
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(time)
ORDER BY (topic, partition, offset)
{{ttl(time + INTERVAL 30 DAY)}};

-- The batch ledger: one row per (host, run_id, sequence) loaded into tcpinfo,
-- written by the materialized view below in the same INSERT as the rows
-- themselves, so "in the ledger" means "its rows are in tcpinfo".  The loader
-- looks batches up here before inserting and skips the ones already there.
-- Batches with no rows are recorded by the loader itself (rows = 0).
-- Retention counts from insertion (inserted_at), so replays of old data dedup too.
-- On a cluster each shard keeps the ledger of the rows it holds (the view runs on
-- the shard that takes the insert), so a batch whose rows span shards has one
-- entry per shard; the loader looks each shard's ledger up on its own.
CREATE TABLE IF NOT EXISTS ingest_batches
(
    inserted_at DateTime,
    batch_time DateTime,
    host {{lowcard(String)}},
    run_id UInt64,
    sequence UInt64,
    rows UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(inserted_at)
ORDER BY (host, run_id, sequence)
{{ttl(inserted_at + INTERVAL 35 DAY)}}
{{sharded(halfMD5(host))}};

CREATE MATERIALIZED VIEW IF NOT EXISTS ingest_batches_mv TO ingest_batches AS
SELECT
    now() AS inserted_at,
    min(time) AS batch_time,
    host,
    run_id,
    sequence,
    count() AS rows
FROM tcpinfo
GROUP BY host, run_id, sequence;

-- Per-host sequence gaps: batches a collector numbered but that never reached
-- ingest (within one collector run; a new run_id restarts the numbering).
-- Re-detection after a loader restart rewrites the same key.
CREATE TABLE IF NOT EXISTS ingest_sequence_gaps
(
    detected_at DateTime,
    time DateTime,
    pop String,
    host String,
    run_id UInt64,
    from_sequence UInt64,
    to_sequence UInt64,
    missing UInt64
)
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(time)
ORDER BY (host, run_id, from_sequence)
{{ttl(time + INTERVAL 90 DAY)}};
