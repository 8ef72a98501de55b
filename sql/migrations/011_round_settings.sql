-- 011: the settings each controller round scored and decided with (owned by the scoring component).
-- One row per round and POP, written with the round's `selections` rows
-- (controller/scoring/round_settings.py `write_round_settings`, called by run_round):
--   bucket_seconds, lookback_seconds  the scoring window (also in `scoring`, as columns to filter on)
--   expire_seconds                    release prefixes not seen for this long (`dyncc control --expire`)
--   scoring                           ScoringSettings (controller/scoring/settings.py) as a JSON object
--                                     of field name -> value, in the fields' units (seconds; min_rtt_ms
--                                     in milliseconds)
--   evidence                          EvidenceSettings (controller/evidence/settings.py), the effect
--                                     model's and trials' settings, the same way; '' = no trials
--   dyncc_version                     the dyncc version that wrote the row
-- `dyncc control explain` explains a prefix with the settings of the latest round that decided
-- it; the report and the lab's summary judge trials in buckets of the recorded bucket_seconds
-- (controller/evidence/load.py `recorded_bucket`).  Rounds recorded before this migration have
-- no row: explain then uses the command line's settings and says so, the report falls back to
-- the spacing of the rounds.
-- A table of its own, created only (no ALTER of `selections` or `round_outcomes`): ClickHouse
-- 18.16 has no ADD COLUMN IF NOT EXISTS, and a replica of an altered replicated table cannot be
-- re-created from the original CREATE on a cluster.  On a cluster it is replicated to every
-- node like `selections` (controller/store/cluster_schema.py: no {{sharded(...)}} marker).
CREATE TABLE IF NOT EXISTS round_settings
(
    round_id String,
    round_time DateTime,
    round_time_ns UInt64,
    pop {{lowcard(String)}},
    bucket_seconds UInt32,
    lookback_seconds UInt32,
    expire_seconds UInt32,
    scoring String,
    evidence String,
    dyncc_version String
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(round_time)
ORDER BY (pop, round_time_ns, round_id)
{{ttl(round_time + INTERVAL 180 DAY)}};
