-- Per (pop, bucket, prefix) over the lookback window, from the scoring_cache cache:
--   counted   = qualifying samples >= %(min_samples)s
--   stat      = median delivery_rate of qualifying flows (bytes/s)
--   threshold = quantileExact(%(threshold_quantile)s) of stat over the prefixes
--               counted in that (pop, bucket)
--   bad       = counted AND stat < threshold
-- The thresholds come from a GROUP BY (pop, bucket) joined back with
-- ANY LEFT JOIN ... USING (no window functions on ClickHouse 18.16).  The join key and the
-- current-version filter are cityHash64 numbers, not (String, ...) tuples: comparing one
-- UInt64 per row is what makes the 36-bucket read cheap (the versions list is tiny).
-- Parameters: %(source)s, %(pop)s ('' = every POP), %(start)s, %(end)s,
-- %(min_samples)s, %(threshold_quantile)s; {{versions}} = the current
-- (pop, toUInt32(bucket), version) tuples, rendered by controller/scoring/query.py.
SELECT
    pop,
    bucket,
    prefix,
    family,
    samples,
    qualifying,
    counted,
    stat,
    low,
    rtt,
    threshold,
    toUInt8(counted AND stat < threshold) AS bad,
    cityHash64(pop, prefix) AS key
FROM
(
    SELECT
        pop,
        bucket,
        prefix,
        family,
        samples,
        qualifying,
        toUInt8(qualifying >= %(min_samples)s) AS counted,
        stat,
        low,
        rtt,
        cityHash64(pop, toUInt32(bucket)) AS pop_bucket
    FROM scoring_cache
    WHERE source = %(source)s
      AND (%(pop)s = '' OR pop = %(pop)s)
      AND bucket >= %(start)s AND bucket < %(end)s
      AND cityHash64(pop, toUInt32(bucket), version) IN
          (
              SELECT cityHash64(tupleElement(v, 1), toUInt32(tupleElement(v, 2)), toUInt64(tupleElement(v, 3)))
              FROM (SELECT arrayJoin([{{versions}}]) AS v)
          )
) AS prefix_buckets
ANY LEFT JOIN
(
    SELECT
        cityHash64(pop, toUInt32(bucket)) AS pop_bucket,
        quantileExactIf(%(threshold_quantile)s)(stat, qualifying >= %(min_samples)s) AS threshold
    FROM scoring_cache
    WHERE source = %(source)s
      AND (%(pop)s = '' OR pop = %(pop)s)
      AND bucket >= %(start)s AND bucket < %(end)s
      AND cityHash64(pop, toUInt32(bucket), version) IN
          (
              SELECT cityHash64(tupleElement(v, 1), toUInt32(tupleElement(v, 2)), toUInt64(tupleElement(v, 3)))
              FROM (SELECT arrayJoin([{{versions}}]) AS v)
          )
    GROUP BY pop, bucket
) AS bucket_thresholds USING (pop_bucket)
