-- 009: the scoring leaves out app-limited samples (owned by the scoring component).
-- A sample whose tcp_info has tcpi_delivery_rate_app_limited set (tcpinfo.app_limited = 1)
-- measured how fast the server had data to send, not what the path could carry (the kernel's
-- net/ipv4/tcp_rate.c).  By default the scoring counts a qualifying sample (bytes_acked
-- > 100 KB) only when it is not app-limited; the setting include_app_limited
-- (controller/scoring/settings.py) counts them all, as before.
--
-- tcpinfo_5m keeps no flag, so this second 5-minute rollup, filled from tcpinfo by its own
-- view, keeps per (bucket, pop, prefix, socket family) what the default scoring reads:
--   samples               every sample (the same count as tcpinfo_5m.samples)
--   qualifying_nal        qualifying samples that are not app-limited: the ones that count
--   qualifying_al         qualifying samples that are app-limited: left out (explain shows the share)
--   delivery_rate_nal_q   quantiles 0.05, 0.1, 0.5 of delivery_rate of the qualifying_nal samples
--   min_rtt_nal_q         quantiles 0.1, 0.5 of min_rtt of the qualifying_nal samples
-- With include_app_limited the scoring reads tcpinfo_5m as before.  The raw path (another
-- bucket length or qualifying threshold) reads the flag in tcpinfo itself.
--
-- Why a second table and view rather than new columns in tcpinfo_5m and a re-created
-- tcpinfo_5m_mv: ClickHouse 18.16 has no ALTER TABLE ... ADD COLUMN IF NOT EXISTS, so a
-- second run would fail; the rows inserted between dropping a view and creating it again
-- would never reach the rollup; and on a cluster `dyncc schema apply` gives a new or rebuilt
-- replica its tables by running the CREATE statements again (controller/store/migrate.py),
-- which would build tcpinfo_5m with 001's columns (refused: the replicated table's metadata
-- has the new ones) and 001's view.  Here every statement is CREATE ... IF NOT EXISTS: safe
-- to run again, and the same on one server, on chDB and on the cluster (sharded like
-- tcpinfo_5m, the view on every node in the shard database: cluster_schema.py).
--
-- Rows inserted into tcpinfo before this migration are not copied here.  With the default
-- scoring, buckets from before the migration therefore have no samples (the bucket in
-- progress has those inserted after it) until they leave the lookback window: for the
-- first hour after the upgrade no prefix reaches min-buckets (12 of the 36 buckets of 3 h),
-- so no prefix is newly selected; prefixes on BBR keep their state (they are seen again
-- from the first bucket on); after 3 h the window is whole again.  The cache keys differ
-- (scoring_buckets.source), so the first round recomputes the window.  Setting
-- include_app_limited for the first 3 h keeps the old definition and its cache meanwhile.
-- The extra view costs one more aggregation of each insert into tcpinfo.

CREATE TABLE IF NOT EXISTS tcpinfo_5m_nal
(
    bucket DateTime,
    pop {{lowcard(String)}},
    prefix String,
    family UInt8,
    samples AggregateFunction(count),
    qualifying_nal AggregateFunction(countIf, UInt8),
    qualifying_al AggregateFunction(countIf, UInt8),
    delivery_rate_nal_q AggregateFunction(quantilesIf(0.05, 0.1, 0.5), UInt64, UInt8),
    min_rtt_nal_q AggregateFunction(quantilesIf(0.1, 0.5), UInt32, UInt8)
)
ENGINE = AggregatingMergeTree()
PARTITION BY toDate(bucket)
ORDER BY (pop, bucket, prefix, family)
{{ttl(bucket + INTERVAL 90 DAY)}}
{{sharded(halfMD5(concat(pop, '/', prefix)))}};

CREATE MATERIALIZED VIEW IF NOT EXISTS tcpinfo_5m_nal_mv TO tcpinfo_5m_nal AS
SELECT
    toStartOfFiveMinute(time) AS bucket,
    pop,
    prefix,
    family,
    countState() AS samples,
    countIfState(bytes_acked > 102400 AND app_limited = 0) AS qualifying_nal,
    countIfState(bytes_acked > 102400 AND app_limited != 0) AS qualifying_al,
    quantilesIfState(0.05, 0.1, 0.5)(delivery_rate, bytes_acked > 102400 AND app_limited = 0) AS delivery_rate_nal_q,
    quantilesIfState(0.1, 0.5)(min_rtt, bytes_acked > 102400 AND app_limited = 0) AS min_rtt_nal_q
FROM tcpinfo
GROUP BY bucket, pop, prefix, family;
