-- Samples and p10 delivery rate of qualifying flows (bytes_acked > 100 KB, as in scoring)
-- of some hosts of a POP in [start_ns, end_ns).  The `time` bounds only prune partitions.
-- The PREFIXES comment marker below is replaced by a has(prefixes, prefix) filter to restrict
-- the window to the prefixes the wave changed (controller/rollout/records.py).
SELECT
    count() AS samples,
    quantile(0.1)(delivery_rate) AS p10
FROM tcpinfo
WHERE pop = %(pop)s
  AND has(%(hosts)s, host)
  AND time >= toDateTime(%(start_s)s) AND time <= toDateTime(%(end_s)s)
  AND time_ns >= %(start_ns)s AND time_ns < %(end_ns)s
  AND bytes_acked > 102400
  /*PREFIXES*/
