-- 007: what became of each controller round's decisions per POP (vocabulary and writer: controller/store/outcomes.py).

-- One row per (round, POP) and step: `recorded` when the round writes its `selections`
-- rows, then the publisher's answer (controller/store/outcomes.py): published | unchanged |
-- rejected | publish_failed | held | killed.  The latest row (by recorded_ns) of a round is
-- its outcome.  A POP's controller state is the `selections` rows of its latest round whose
-- decisions are in force (published / unchanged), so a rejected or failed round never
-- becomes state (controller/scoring/state.py); reports count only such rounds.
CREATE TABLE IF NOT EXISTS round_outcomes
(
    round_id String,
    round_time DateTime,
    round_time_ns UInt64,
    pop {{lowcard(String)}},
    recorded_ns UInt64,
    status {{lowcard(String)}},
    version UInt64,
    prefixes UInt32,
    reason String
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(round_time)
ORDER BY (pop, round_time_ns, recorded_ns)
{{ttl(round_time + INTERVAL 180 DAY)}};

-- Rounds recorded before this table existed: the status of the config generated from the
-- round (config_versions.round_id) when there is one, else `legacy` (treated as in force,
-- as before).  Re-runnable: rounds that already have an outcome are skipped.
INSERT INTO round_outcomes (round_id, round_time, round_time_ns, pop, recorded_ns, status, version, prefixes, reason)
SELECT
    round_id,
    first_time,
    first_time_ns,
    pop,
    toUInt64(0),
    if(config_status = '', 'legacy', config_status),
    config_version,
    on_bbr,
    'recorded before round outcomes existed'
FROM
(
    SELECT
        round_id,
        pop,
        min(round_time) AS first_time,
        min(round_time_ns) AS first_time_ns,
        toUInt32(countIf(decision IN ('select', 'keep'))) AS on_bbr
    FROM selections
    GROUP BY round_id, pop
) AS rounds
ANY LEFT JOIN
(
    SELECT
        round_id,
        pop,
        toString(argMax(status, created_ns)) AS config_status,
        argMax(version, created_ns) AS config_version
    FROM config_versions
    WHERE kind IN ('canary', 'full', 'candidate')
    GROUP BY round_id, pop
) AS configs USING (round_id, pop)
WHERE (pop, round_id) NOT IN (SELECT pop, round_id FROM round_outcomes);
