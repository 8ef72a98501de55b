-- Per (pop, prefix) scores from a generation of the scoring state: the columns of
-- scoring_prefixes.sql, with the masks on bit (bucket number mod 64) (controller/scoring/
-- incremental.py turns them to bit (bucket - window start) / bucket length).  Averages are
-- the sums over the counted buckets divided by their number, as scoring_prefixes.sql does.
-- Sorted by pop, prefix.
-- Parameters: %(source)s, %(params)s; {{bases}} = the (pop, generation) tuples to read.
SELECT
    pop,
    prefix,
    family,
    samples,
    qualifying,
    toUInt32(counted) AS counted_buckets,
    toUInt32(bad) AS bad_buckets,
    counted_mask,
    bad_mask,
    if(counted > 0, bad / counted, 0.) AS duty_cycle,
    if(counted > 0, sum_stat / counted, nan) AS median_delivery_rate,
    if(counted > 0, sum_low / counted, nan) AS low_delivery_rate,
    if(counted > 0, sum_rtt / counted / 1000., nan) AS median_min_rtt_ms,
    toUInt32(low_rtt) AS low_rtt_buckets
FROM scoring_state
WHERE source = %(source)s
  AND params = %(params)s
  AND cityHash64(pop, generation) IN
      (
          SELECT cityHash64(tupleElement(v, 1), toUInt64(tupleElement(v, 2)))
          FROM (SELECT arrayJoin([{{bases}}]) AS v)
      )
ORDER BY pop, prefix
