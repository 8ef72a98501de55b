-- dyncc report: how many (pop, prefix, round time) reverts the window holds (report_reverted.sql
-- lists the newest).  {{reverted}} is report_reverted_rows.sql.
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s.
SELECT uniqExact(pop, prefix, round_time) AS reverted
FROM ({{reverted}}) AS r
