-- dyncc access-log: what the ledger of this store holds of one access log (on a cluster, run on
-- each shard: that shard's own ledger).  inserts = 0: none of the log's lines are here;
-- else every line of the log at or below offset `last` that belongs here is loaded.
-- Parameters: %(pop)s, %(host)s, %(log_id)s.
SELECT
    count() AS inserts,
    max(last_offset) AS last
FROM http_log_ledger
WHERE pop = %(pop)s AND host = %(host)s AND log_id = %(log_id)s
