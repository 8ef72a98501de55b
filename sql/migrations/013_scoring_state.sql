-- 013: incremental scoring (owned by the scoring component; docs/performance.md "Scoring round").
--
-- `scoring_cache` replaces `scoring_buckets` (003): the same per-(pop, bucket, prefix) statistics,
-- now sharded like the telemetry (by client prefix), so on a cluster each shard computes and keeps
-- the statistics of its own prefixes (controller/scoring/query.py runs the refresh on every shard).
-- A table of a new name: one name is either sharded or not in every migration
-- (controller/store/cluster_schema.py).  The old cache is dropped and scoring_versions emptied
-- (its versions pointed at the old rows): the first round after the migration recomputes the
-- window, as after 006 and 009.
--
-- `scoring_state`: per (pop, prefix), the sums a round's scores need over the window (buckets
-- seen, samples, counted and bad buckets, the bucket bitmasks, the sums of the per-bucket
-- statistics), one generation per round (controller/scoring/incremental.py).  A round adds the
-- contributions of the (pop, bucket, version)s that entered the window and subtracts those that
-- left it (a bucket that slid out, or a version replaced by late data) instead of re-reading the
-- window.  Bit (bucket number mod 64) of a mask is that bucket (a window of at most 64 buckets
-- never has two buckets on one bit); sums wrap modulo 2^64, so a subtraction is the addition of
-- the two's complement and the result is exact.  The statistics' sums add floor()ed values:
-- integers below 2^53 add exactly in any order, so the state equals a full recompute.
-- Partitioned by generation: a round drops the generations before the one it built on.
--
-- `scoring_state_keys`: which (pop, bucket, version) a generation holds and each one's
-- threshold (the global percentile of the bucket's statistic, computed once when the version
-- entered the state and needed again to subtract it), per `source` and `params` (the settings
-- the counted / bad / low-RTT flags depend on).  Written after every shard's state: the commit
-- of a generation.  Small: POPs x buckets rows per round.
DROP TABLE IF EXISTS scoring_buckets;

TRUNCATE TABLE IF EXISTS scoring_versions;

CREATE TABLE IF NOT EXISTS scoring_cache
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
{{ttl(bucket + INTERVAL 3 DAY)}}
{{sharded(halfMD5(concat(pop, '/', prefix)))}};

CREATE TABLE IF NOT EXISTS scoring_state
(
    pop {{lowcard(String)}},
    source {{lowcard(String)}},
    params String,
    generation UInt64,
    prefix String,
    family UInt8,
    seen UInt64,
    samples UInt64,
    qualifying UInt64,
    counted UInt64,
    bad UInt64,
    counted_mask UInt64,
    bad_mask UInt64,
    low_rtt UInt64,
    sum_stat Float64,
    sum_low Float64,
    sum_rtt Float64
)
ENGINE = MergeTree()
PARTITION BY generation
ORDER BY (pop, source, params, prefix)
{{sharded(halfMD5(concat(pop, '/', prefix)))}};

CREATE TABLE IF NOT EXISTS scoring_state_keys
(
    source {{lowcard(String)}},
    params String,
    generation UInt64,
    built_on UInt64,
    pop {{lowcard(String)}},
    bucket DateTime,
    version UInt64,
    threshold Float64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(generation, 1000000000)))
ORDER BY (source, params, pop, generation, bucket);
