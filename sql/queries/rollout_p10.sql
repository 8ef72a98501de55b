-- Samples and p10 delivery rate of qualifying flows (bytes_acked > 100 KB, as in scoring)
-- of some hosts of a POP in [start_ns, end_ns).  The `time` bounds only prune partitions.
-- The {{prefix_filter}} slot is empty or rollout_p10_prefix_filter.sql, which restricts
-- the window to the prefixes the wave changed (sent as a data table: controller/rollout/records.py).
SELECT
    count() AS samples,
    quantile(0.1)(delivery_rate) AS p10
FROM tcpinfo
WHERE pop = %(pop)s
  AND has(%(hosts)s, host)
  AND time >= toDateTime(%(start_s)s) AND time <= toDateTime(%(end_s)s)
  AND time_ns >= %(start_ns)s AND time_ns < %(end_ns)s
  AND bytes_acked > 102400
  {{prefix_filter}}
