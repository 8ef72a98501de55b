-- Samples per (pop, bucket) in raw tcpinfo over [start, end), bucketed by
-- %(bucket_seconds)s (the accelerated-clock / custom --min-bytes path).
-- Parameters: %(pop)s ('' = every POP), %(start)s, %(end)s (the part of the window to check), %(bucket_seconds)s.
SELECT
    pop,
    toDateTime(intDiv(toUInt32(time), %(bucket_seconds)s) * %(bucket_seconds)s) AS bucket,
    toUInt64(count()) AS samples
FROM tcpinfo
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND time >= %(start)s AND time < %(end)s
GROUP BY pop, bucket
