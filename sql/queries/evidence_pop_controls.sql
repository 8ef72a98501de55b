-- The concurrent controls of the effect model (controller/evidence/switchback.py `pop_controls`
-- computes the same in pandas): per (pop, bucket) the POP's shock, the mean over the POP's
-- prefixes of their bucket's mean ln(delivery rate) (CUBIC samples only) minus the mean of the
-- same prefix's previous %(trail)s such buckets, these within %(span)s seconds before it.  The
-- reference is causal and bounded, so a bucket's control is the same whichever window a caller
-- reads (a round, the report, `explain`): read from %(start)s - %(span)s s, out from %(start)s.
-- Qualifying samples: bytes_acked > %(min_bytes)s, a delivery rate above 0, app-limited ones left
-- out unless %(include_app_limited)s = 1; a prefix's bucket counts with at least %(min_samples)s.
-- The POPs are those of the data table {{data}} (pop String): one row per (pop, bucket), the
-- statement does not grow with the data.  Parameters: %(read_start)s, %(start)s, %(end)s
-- (DateTime), %(bucket_seconds)s, %(min_bytes)s, %(min_samples)s, %(include_app_limited)s,
-- %(trail)s, %(span)s.
SELECT
    pop,
    ts_arr[i] AS ts,
    avg(y_arr[i] - (cs[i - 1] - if(i - 1 - %(trail)s >= 1, cs[i - 1 - %(trail)s], 0)) / %(trail)s) AS control,
    toUInt64(count()) AS prefixes
FROM
(
    SELECT
        pop,
        prefix,
        arraySort(groupArray((ts, y))) AS cells,
        arrayMap(c -> tupleElement(c, 1), cells) AS ts_arr,
        arrayMap(c -> tupleElement(c, 2), cells) AS y_arr,
        arrayCumSum(y_arr) AS cs
    FROM
    (
        SELECT
            pop,
            prefix,
            intDiv(toUInt32(time), %(bucket_seconds)s) * %(bucket_seconds)s AS ts,
            avg(log(delivery_rate)) AS y
        FROM tcpinfo
        WHERE time >= %(read_start)s AND time < %(end)s
          AND pop IN (SELECT pop FROM {{data}})
          AND bytes_acked > %(min_bytes)s AND delivery_rate > 0 AND cc = 'cubic'
          AND (app_limited = 0 OR %(include_app_limited)s = 1)
        GROUP BY pop, prefix, ts
        HAVING count() >= %(min_samples)s
    )
    GROUP BY pop, prefix
)
ARRAY JOIN arrayEnumerate(ts_arr) AS i
WHERE i > %(trail)s
  AND ts_arr[i] - ts_arr[i - %(trail)s] <= %(span)s
  AND ts_arr[i] >= toUInt32(%(start)s)
GROUP BY pop, ts
ORDER BY pop, ts
