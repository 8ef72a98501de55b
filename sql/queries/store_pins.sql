-- The operator's pins in force (sql/migrations/012_operator_controls.sql): the latest row of each
-- (pop, prefix) when it is a 'pin'.  Every round reads them (controller/scoring/pins.py) and the
-- report lists them (controller/report/data.py).  Pins are operator actions (a handful per POP),
-- so the table stays small; every row is read.  at_ns / ts: when it was pinned (ns / Unix s).
-- Parameters: %(pop)s ('' = every POP).
SELECT
    pop,
    prefix,
    pin_algorithm AS algorithm,
    pin_who AS who,
    pin_why AS why,
    pin_ns AS at_ns,
    intDiv(pin_ns, 1000000000) AS ts
FROM
(
    SELECT
        pop,
        prefix,
        argMax(action, at_ns) AS last_action,
        argMax(algorithm, at_ns) AS pin_algorithm,
        argMax(who, at_ns) AS pin_who,
        argMax(why, at_ns) AS pin_why,
        max(at_ns) AS pin_ns
    FROM pins
    WHERE (%(pop)s = '' OR pop = %(pop)s)
    GROUP BY pop, prefix
)
WHERE last_action = 'pin'
ORDER BY pop, prefix
