-- Finalized 5-minute rollup rows for one POP (or all, pop = '') over a time range: the reference
-- read of tcpinfo_5m that sql/migrations/001_tcpinfo.sql points to (the tests run it; the scoring
-- reads the rollup with scoring_refresh_rollup.sql).
-- One row per (bucket, pop, prefix): the rollup's rows per socket family are merged (an IPv4
-- client on IPv4 and on IPv6 sockets, ::ffff:a.b.c.d, is one prefix); `family` is the prefix's
-- (10 when it contains ':', else 2).
-- Parameters: %(pop)s, %(start)s, %(end)s (DateTime literals).
SELECT
    bucket,
    pop,
    prefix,
    if(position(prefix, ':') > 0, 10, 2) AS family,
    countMerge(samples) AS samples,
    countIfMerge(qualifying) AS qualifying,
    quantilesMerge(0.05, 0.1, 0.5)(delivery_rate_q) AS delivery_rate_q,
    quantilesIfMerge(0.05, 0.1, 0.5)(delivery_rate_qual_q) AS delivery_rate_qual_q,
    quantilesIfMerge(0.1, 0.5)(min_rtt_qual_q) AS min_rtt_qual_q,
    quantilesMerge(0.5, 0.9)(retrans_ratio_q) AS retrans_ratio_q,
    sumMerge(bytes_acked_sum) AS bytes_acked,
    sumMerge(bytes_sent_sum) AS bytes_sent,
    sumMerge(bytes_retrans_sum) AS bytes_retrans
FROM tcpinfo_5m
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND bucket >= %(start)s AND bucket < %(end)s
GROUP BY bucket, pop, prefix
ORDER BY pop, prefix, bucket
