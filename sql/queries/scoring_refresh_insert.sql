-- (Re)compute the per-prefix statistics of the given (pop, bucket)s into the scoring_cache
-- cache, tagged with %(version)s.  {{source}} is scoring_refresh_rollup.sql (the 5-minute rollup)
-- or scoring_refresh_raw.sql (raw tcpinfo, other bucket / threshold), spliced in by
-- controller/scoring/query.py; both give one row per (pop, bucket, prefix) whatever socket
-- families saw the prefix, with the prefix's family (2 = IPv4, 10 = IPv6):
--   stat = median, low = 10th percentile of delivery_rate of qualifying flows;
--   rtt = median min_rtt (µs) of them, floored: ClickHouse 18.16 returns quantiles of UInt32
--   as UInt32, newer servers as Float64.
-- Parameters: %(source)s, %(version)s and those of the source.
INSERT INTO scoring_cache
    (pop, source, bucket, version, prefix, family, samples, qualifying, stat, low, rtt)
SELECT
    pop,
    %(source)s,
    bucket,
    %(version)s,
    prefix,
    family,
    samples,
    qualifying,
    rate_q[3],
    rate_q[2],
    floor(rtt_q)
FROM
(
{{source}}
)
