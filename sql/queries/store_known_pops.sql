-- The POPs the store knows: every POP with telemetry and every POP with a published config.
-- Telemetry is read from the 5-minute rollup: its materialized view receives every row inserted
-- into tcpinfo and it keeps them longer (90 days against 30), and it is a small fraction of
-- tcpinfo's size.  One row per POP, sorted (controller/store/pops.py).
SELECT pop
FROM
(
    SELECT DISTINCT pop FROM tcpinfo_5m
    UNION ALL
    SELECT DISTINCT pop FROM config_versions WHERE status = 'published'
)
GROUP BY pop
ORDER BY pop
