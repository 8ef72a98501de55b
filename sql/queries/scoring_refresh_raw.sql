-- (Re)compute the per-prefix statistics of the given (pop, bucket)s from raw tcpinfo
-- into the scoring_buckets cache (bucket of %(bucket_seconds)s, a flow qualifies when
-- bytes_acked > %(min_bytes)s).  Same columns as scoring_refresh_rollup.sql.
-- Parameters: %(source)s, %(version)s, %(start)s, %(end)s, %(bucket_seconds)s,
-- %(min_bytes)s; {keys} = a list of (pop, toUInt32(bucket)) tuples.
INSERT INTO scoring_buckets
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
    SELECT
        pop,
        toDateTime(intDiv(toUInt32(time), %(bucket_seconds)s) * %(bucket_seconds)s) AS bucket,
        prefix,
        family,
        toUInt64(count()) AS samples,
        toUInt64(countIf(bytes_acked > %(min_bytes)s)) AS qualifying,
        quantilesIf(0.05, 0.1, 0.5)(delivery_rate, bytes_acked > %(min_bytes)s) AS rate_q,
        quantileIf(0.5)(min_rtt, bytes_acked > %(min_bytes)s) AS rtt_q
    FROM tcpinfo
    WHERE time >= %(start)s AND time < %(end)s
      AND (pop, intDiv(toUInt32(time), %(bucket_seconds)s) * %(bucket_seconds)s) IN ({keys})
    GROUP BY pop, bucket, prefix, family
)
