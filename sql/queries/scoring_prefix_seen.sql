-- explain: the 5-minute rollup rows of one prefix at one POP in a window (every row inserted
-- into tcpinfo reaches the rollup, whatever bucket the scoring uses).  0 and no decision
-- recorded: explain refuses the prefix as unknown.
-- Parameters: %(pop)s, %(prefix)s, %(start)s, %(end)s (DateTime).
SELECT count() AS buckets
FROM tcpinfo_5m
WHERE pop = %(pop)s AND prefix = %(prefix)s
  AND bucket >= toStartOfFiveMinute(%(start)s) AND bucket < %(end)s
