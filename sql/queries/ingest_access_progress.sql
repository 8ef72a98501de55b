-- dyncc access-log: how far one access log is done (loaded or dead-lettered): every line
-- before `end_offset`.  records = 0: no progress recorded yet.
-- Parameters: %(pop)s, %(host)s, %(log_id)s.
SELECT
    count() AS records,
    max(end_offset) AS end_offset
FROM http_log_progress
WHERE pop = %(pop)s AND host = %(host)s AND log_id = %(log_id)s
