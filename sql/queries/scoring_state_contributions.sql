-- The contribution of the given (pop, bucket, version)s of the scoring_cache to the scoring
-- state, times %(sign)s (1 to add a bucket, 2^64 - 1 = -1 modulo 2^64 to subtract one) and
-- %(fsign)s (1.0 / -1.0) for the sums of statistics; one branch of scoring_state_update.sql.
-- Per row: the bucket was seen, its samples, counted (qualifying >= %(min_samples)s), bad
-- (counted and the statistic below the bucket's threshold), its bit in the masks (bucket number
-- mod 64), low RTT (counted and median min_rtt below %(min_rtt_us)s µs), and the floor()ed
-- statistics of a counted bucket (integers: their sums are exact in any order).
-- Parameters: %(source)s, %(start)s, %(end)s (bounds of the keys' buckets), %(bucket_seconds)s,
-- %(min_samples)s, %(min_rtt_us)s, %(sign)s, %(fsign)s; {{keys}} = the (pop, toUInt32(bucket),
-- version, threshold) tuples (thresholds from scoring_state_thresholds.sql, or as recorded in
-- scoring_state_keys for a version that leaves).
SELECT
    pop,
    prefix,
    family,
    %(sign)s * toUInt64(1) AS d_seen,
    %(sign)s * samples AS d_samples,
    %(sign)s * qualifying AS d_qualifying,
    %(sign)s * toUInt64(counted) AS d_counted,
    %(sign)s * toUInt64(bad) AS d_bad,
    %(sign)s * bitShiftLeft(toUInt64(counted), slot) AS d_counted_mask,
    %(sign)s * bitShiftLeft(toUInt64(bad), slot) AS d_bad_mask,
    %(sign)s * toUInt64(counted AND rtt < %(min_rtt_us)s) AS d_low_rtt,
    if(counted, floor(stat), 0.) * %(fsign)s AS d_sum_stat,
    if(counted, floor(low), 0.) * %(fsign)s AS d_sum_low,
    if(counted, rtt, 0.) * %(fsign)s AS d_sum_rtt
FROM
(
    SELECT
        pop,
        prefix,
        family,
        samples,
        qualifying,
        stat,
        low,
        rtt,
        toUInt8(qualifying >= %(min_samples)s) AS counted,
        toUInt8(counted AND stat < threshold) AS bad,
        toUInt8(modulo(intDiv(toUInt32(bucket), %(bucket_seconds)s), 64)) AS slot
    FROM
    (
        SELECT
            pop,
            bucket,
            prefix,
            family,
            samples,
            qualifying,
            stat,
            low,
            rtt,
            cityHash64(pop, toUInt32(bucket), version) AS key_hash
        FROM scoring_cache
        WHERE source = %(source)s
          AND bucket >= %(start)s AND bucket < %(end)s
          AND key_hash IN
              (
                  SELECT cityHash64(tupleElement(v, 1), toUInt32(tupleElement(v, 2)), toUInt64(tupleElement(v, 3)))
                  FROM (SELECT arrayJoin([{{keys}}]) AS v)
              )
    ) AS cache_rows
    ALL INNER JOIN
    (
        SELECT
            cityHash64(tupleElement(v, 1), toUInt32(tupleElement(v, 2)), toUInt64(tupleElement(v, 3))) AS key_hash,
            toFloat64(tupleElement(v, 4)) AS threshold
        FROM (SELECT arrayJoin([{{keys}}]) AS v)
    ) AS key_thresholds USING (key_hash)
)
