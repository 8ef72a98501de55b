-- dyncc report: delivery rate (bytes/s) of the socket polls of treated (BBR-selected) prefixes
-- after each entered its group, per POP, congestion control (tcpinfo.cc, as the collector read
-- it in that poll) and size class (bytes_acked above 102400, or not).  With `dyncc agent
-- --enforce bpf` a treated prefix's connections start on cubic and are switched to bbr once past
-- the config's threshold, so the rows compare switched and unswitched flows; with the route
-- mode every connection of a treated prefix is on bbr from its first packet, except in its
-- trial's CUBIC blocks and after a revert (a trial prefix is treated: report_treatment_groups.sql).
-- {{groups}} is report_treatment_groups.sql (the group and t0 of each (pop, prefix)).
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s.
SELECT
    pop,
    cc,
    size_class,
    samples,
    prefixes,
    q[1] AS p10,
    q[2] AS p50,
    q[3] AS p90
FROM
(
    SELECT
        pop,
        cc,
        if(bytes_acked > 102400, 'above', 'below') AS size_class,
        count() AS samples,
        uniqExact(prefix) AS prefixes,
        quantiles(0.1, 0.5, 0.9)(delivery_rate) AS q
    FROM
    (
        SELECT pop, prefix, toUnixTimestamp(time) AS ts, cc, bytes_acked, delivery_rate
        FROM tcpinfo
        WHERE (%(pop)s = '' OR pop = %(pop)s)
          AND time >= %(start)s AND time < %(end)s
    ) AS src
    ALL INNER JOIN ({{groups}}) AS groups USING (pop, prefix)
    WHERE grp = 'treated' AND ts >= t0_ts
    GROUP BY pop, cc, size_class
)
ORDER BY pop, size_class, cc
