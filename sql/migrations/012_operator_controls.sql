-- 012: the operator's controls (owned by the scoring component; docs/rollout.md "Operator controls").
--
-- `pins`: one row per `dyncc control pin` / `unpin` (controller/scoring/pins.py), append-only.
-- The latest row (by at_ns) of a (pop, prefix) says whether it is pinned: action 'pin' with its
-- algorithm (bbr: in the POP's signed config, cubic: not), who did it and why; 'unpin' hands the
-- prefix back to the rounds.  Every round reads the pins in force (sql/queries/store_pins.sql)
-- and decides a pinned prefix `pin` whatever its scores, trials, caps or holds say.
--
-- `round_controls`: one row per round and POP, written with the round's `selections` rows
-- (controller/scoring/round_settings.py `write_round_controls`): the deny list in force (comma-
-- separated CIDRs as given, '' = none), the --max-bbr-per-pop cap and the number of pins the
-- round applied to the POP.  A deny list that changes between rounds is logged, and the record
-- says which list each round applied.
-- Tables of their own, created only (no ALTER; see 011).  On a cluster both are replicated to
-- every node like `selections` (no {{sharded(...)}} marker).
CREATE TABLE IF NOT EXISTS pins
(
    pop {{lowcard(String)}},
    prefix String,
    action {{lowcard(String)}},
    algorithm {{lowcard(String)}},
    who String,
    why String,
    at_time DateTime,
    at_ns UInt64
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(at_time)
ORDER BY (pop, prefix, at_ns);

CREATE TABLE IF NOT EXISTS round_controls
(
    round_id String,
    round_time DateTime,
    round_time_ns UInt64,
    pop {{lowcard(String)}},
    deny String,
    max_bbr_per_pop UInt32,
    pins UInt32
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(round_time)
ORDER BY (pop, round_time_ns, round_id)
{{ttl(round_time + INTERVAL 180 DAY)}};
