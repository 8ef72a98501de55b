-- 008: HTTP requests from the edge web servers' access logs (`dyncc access-log`), the source of
-- the report's goodput (bytes_sent / request_time per request; the seed's fig. 5).
-- One row per access-log line; `prefix` is the client prefix exactly as tcpinfo and selections
-- spell it (/24 IPv4, /56 IPv6; an IPv4-mapped client is IPv4), so requests join the scoring's
-- groups; `family` is the client's family (2 for an IPv4 or IPv4-mapped client, else 10), the
-- family of `prefix`.  log_id / offset identify the line: which log of the host (a hash of the
-- log file's first line, so a renamed file is still the same log) and the byte offset where the
-- line starts.  See docs/ingest.md ("Access logs").

CREATE TABLE IF NOT EXISTS http_requests
(
    time DateTime {{codec(Delta, ZSTD(1))}},
    time_ms UInt16,
    pop {{lowcard(String)}},
    host {{lowcard(String)}},
    prefix String,
    family UInt8,
    client String,
    status UInt16,
    bytes_sent UInt64,
    body_bytes UInt64,
    request_time Float64,
    connection UInt64,
    connection_requests UInt32,
    method {{lowcard(String)}},
    uri String,
    log_id UInt64,
    offset UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(time)
ORDER BY (pop, prefix, time)
{{ttl(time + INTERVAL 35 DAY)}}
{{sharded(halfMD5(concat(pop, '/', prefix)))}};

-- The access-log ledger: per INSERT into http_requests, the lines it carried of one log
-- (pop, host, log_id): the highest line offset and the row count.  Written by the view below
-- in the same INSERT as the rows, so "in the ledger" means "in http_requests".  The loader
-- inserts a log's lines in offset order, so every line at or below a log's highest ledger
-- offset is loaded; after a crash it skips those.  On a cluster each shard keeps the ledger of
-- the rows it holds (the view runs on the shard that takes the insert) and is looked up on
-- its own.  Retention counts from insertion, like ingest_batches.
CREATE TABLE IF NOT EXISTS http_log_ledger
(
    inserted_at DateTime,
    pop {{lowcard(String)}},
    host {{lowcard(String)}},
    log_id UInt64,
    first_offset UInt64,
    last_offset UInt64,
    rows UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(inserted_at)
ORDER BY (pop, host, log_id)
{{ttl(inserted_at + INTERVAL 35 DAY)}}
{{sharded(halfMD5(concat(pop, '/', host)))}};

CREATE MATERIALIZED VIEW IF NOT EXISTS http_log_ledger_mv TO http_log_ledger AS
SELECT
    now() AS inserted_at,
    pop,
    host,
    log_id,
    min(offset) AS first_offset,
    max(offset) AS last_offset,
    count() AS rows
FROM http_requests
GROUP BY pop, host, log_id;

-- How far each log is done: every line before end_offset is loaded or dead-lettered.
-- Written after each chunk of lines (so also past lines that carried no row: bad lines);
-- the ledger above is what keeps a crash before this row from loading lines twice.
-- path is where the log was last read (informational: a rotated log keeps its log_id).
CREATE TABLE IF NOT EXISTS http_log_progress
(
    updated DateTime,
    pop String,
    host String,
    log_id UInt64,
    path String,
    end_offset UInt64
)
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(updated)
ORDER BY (pop, host, log_id)
{{ttl(updated + INTERVAL 35 DAY)}};
