-- The threshold of each given (pop, bucket, version) of the scoring_cache: the
-- %(threshold_quantile)s quantile (exact) of the statistic over the prefixes counted in it,
-- as scoring_timeline.sql computes it (0 when no prefix counted: then no prefix is bad).
-- On a cluster this reads every shard (the Distributed table): the one global step of a round.
-- Parameters: %(source)s, %(start)s, %(end)s (bounds of the keys' buckets), %(min_samples)s,
-- %(threshold_quantile)s; {{keys}} = the (pop, toUInt32(bucket), version) tuples, rendered by
-- controller/scoring/incremental.py (POPs x new buckets: bounded by the configuration).
SELECT
    pop,
    bucket,
    version,
    if(isNaN(q), 0., q) AS threshold
FROM
(
    SELECT
        pop,
        bucket,
        version,
        toFloat64(quantileExactIf(%(threshold_quantile)s)(stat, qualifying >= %(min_samples)s)) AS q
    FROM scoring_cache
    WHERE source = %(source)s
      AND bucket >= %(start)s AND bucket < %(end)s
      AND cityHash64(pop, toUInt32(bucket), version) IN
          (
              SELECT cityHash64(tupleElement(v, 1), toUInt32(tupleElement(v, 2)), toUInt64(tupleElement(v, 3)))
              FROM (SELECT arrayJoin([{{keys}}]) AS v)
          )
    GROUP BY pop, bucket, version
)
