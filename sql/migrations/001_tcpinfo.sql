-- 001: raw per-socket telemetry and its 5-minute per-prefix rollup.
-- Template markers ({{lowcard(..)}}, {{codec(..)}}, {{ttl(..)}}) are expanded by
-- controller/store/sql.py according to the server version; on ClickHouse
-- 18.16 they vanish, on newer servers and chDB they add LowCardinality, CODECs
-- and TTL.  Everything else must parse on 18.16 and on chDB 26.x.
-- {{sharded(KEY)}} marks a table sharded by KEY on a cluster (the client prefix,
-- controller/store/topology.py); on one server it vanishes (cluster_schema.py).

CREATE TABLE IF NOT EXISTS tcpinfo
(
    time DateTime {{codec(Delta, ZSTD(1))}},
    time_ns UInt64 {{codec(Delta, ZSTD(1))}},
    pop {{lowcard(String)}},
    host {{lowcard(String)}},
    netns {{lowcard(String)}},
    sequence UInt64,
    run_id UInt64,
    family UInt8,
    prefix String,
    src_addr FixedString(16),
    dst_addr FixedString(16),
    src_port UInt16,
    dst_port UInt16,
    cookie UInt64,
    state UInt8,
    cc {{lowcard(String)}},
    tcp_info_len UInt16,
    has_bbr_info UInt8,
    uid UInt32,
    inode UInt32,
    ca_state UInt8,
    retransmits UInt8,
    probes UInt8,
    backoff UInt8,
    options UInt8,
    snd_wscale UInt8,
    rcv_wscale UInt8,
    app_limited UInt8,
    rto UInt32,
    ato UInt32,
    snd_mss UInt32,
    rcv_mss UInt32,
    unacked UInt32,
    sacked UInt32,
    lost UInt32,
    retrans UInt32,
    fackets UInt32,
    last_data_sent UInt32,
    last_ack_sent UInt32,
    last_data_recv UInt32,
    last_ack_recv UInt32,
    pmtu UInt32,
    rcv_ssthresh UInt32,
    rtt UInt32,
    rttvar UInt32,
    snd_ssthresh UInt32,
    snd_cwnd UInt32,
    advmss UInt32,
    reordering UInt32,
    rcv_rtt UInt32,
    rcv_space UInt32,
    total_retrans UInt32,
    pacing_rate UInt64,
    max_pacing_rate UInt64,
    bytes_acked UInt64,
    bytes_received UInt64,
    segs_out UInt32,
    segs_in UInt32,
    notsent_bytes UInt32,
    min_rtt UInt32,
    data_segs_in UInt32,
    data_segs_out UInt32,
    delivery_rate UInt64,
    busy_time UInt64,
    rwnd_limited UInt64,
    sndbuf_limited UInt64,
    delivered UInt32,
    delivered_ce UInt32,
    bytes_sent UInt64,
    bytes_retrans UInt64,
    dsack_dups UInt32,
    reord_seen UInt32,
    rcv_ooopack UInt32,
    snd_wnd UInt32,
    rcv_wnd UInt32,
    rehash UInt32,
    total_rto UInt32,
    total_rto_recoveries UInt32,
    total_rto_time UInt32,
    bbr_bw UInt64,
    bbr_min_rtt UInt32,
    bbr_pacing_gain UInt32,
    bbr_cwnd_gain UInt32,
    skmem_rmem_alloc UInt32,
    skmem_rcvbuf UInt32,
    skmem_wmem_alloc UInt32,
    skmem_sndbuf UInt32,
    skmem_fwd_alloc UInt32,
    skmem_wmem_queued UInt32,
    skmem_optmem UInt32,
    skmem_backlog UInt32,
    skmem_drops UInt32
)
ENGINE = MergeTree()
PARTITION BY toDate(time)
ORDER BY (pop, prefix, time)
{{ttl(time + INTERVAL 30 DAY)}}
SETTINGS index_granularity = 8192
{{sharded(halfMD5(concat(pop, '/', prefix)))}};

-- One row per (5-minute bucket, pop, prefix, family) after merges; read it with
-- the -Merge combinators and GROUP BY (see sql/queries/store_rollup_read.sql).
-- "qualifying" flows are those with bytes_acked > 100 KB (102400 bytes).
CREATE TABLE IF NOT EXISTS tcpinfo_5m
(
    bucket DateTime,
    pop {{lowcard(String)}},
    prefix String,
    family UInt8,
    samples AggregateFunction(count),
    qualifying AggregateFunction(countIf, UInt8),
    delivery_rate_q AggregateFunction(quantiles(0.05, 0.1, 0.5), UInt64),
    delivery_rate_qual_q AggregateFunction(quantilesIf(0.05, 0.1, 0.5), UInt64, UInt8),
    min_rtt_qual_q AggregateFunction(quantilesIf(0.1, 0.5), UInt32, UInt8),
    retrans_ratio_q AggregateFunction(quantiles(0.5, 0.9), Float64),
    bytes_acked_sum AggregateFunction(sum, UInt64),
    bytes_sent_sum AggregateFunction(sum, UInt64),
    bytes_retrans_sum AggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree()
PARTITION BY toDate(bucket)
ORDER BY (pop, bucket, prefix, family)
{{ttl(bucket + INTERVAL 90 DAY)}}
{{sharded(halfMD5(concat(pop, '/', prefix)))}};

CREATE MATERIALIZED VIEW IF NOT EXISTS tcpinfo_5m_mv TO tcpinfo_5m AS
SELECT
    toStartOfFiveMinute(time) AS bucket,
    pop,
    prefix,
    family,
    countState() AS samples,
    countIfState(bytes_acked > 102400) AS qualifying,
    quantilesState(0.05, 0.1, 0.5)(delivery_rate) AS delivery_rate_q,
    quantilesIfState(0.05, 0.1, 0.5)(delivery_rate, bytes_acked > 102400) AS delivery_rate_qual_q,
    quantilesIfState(0.1, 0.5)(min_rtt, bytes_acked > 102400) AS min_rtt_qual_q,
    quantilesState(0.5, 0.9)(if(bytes_sent > 0, bytes_retrans / bytes_sent, 0.)) AS retrans_ratio_q,
    sumState(bytes_acked) AS bytes_acked_sum,
    sumState(bytes_sent) AS bytes_sent_sum,
    sumState(bytes_retrans) AS bytes_retrans_sum
FROM tcpinfo
GROUP BY bucket, pop, prefix, family;
