-- 005: closing sequence gaps that fill later (owned by the ingest component; see docs/ingest.md).

-- A batch that arrives after a later batch of its collector run, inside a
-- recorded gap of ingest_sequence_gaps, fills one place of that gap: one row
-- per (gap, filled sequence).  The loader writes it after the batch's rows
-- landed (the batch is then in the ingest_batches ledger), and again when the
-- batch is redelivered, so a loader restart between the two writes loses no
-- fill; the Replacing engine keeps one row per key after merges.  A gap is open
-- while missing > the number of distinct filled sequences of its key
-- (sql/queries/ingest_gaps.sql, ingest_open_gaps.sql).  `time` is the gap's
-- time, so fills expire with their gap.
CREATE TABLE IF NOT EXISTS ingest_gap_fills
(
    filled_at DateTime,
    time DateTime,
    pop String,
    host String,
    run_id UInt64,
    from_sequence UInt64,
    sequence UInt64
)
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(time)
ORDER BY (host, run_id, from_sequence, sequence)
{{ttl(time + INTERVAL 90 DAY)}};
