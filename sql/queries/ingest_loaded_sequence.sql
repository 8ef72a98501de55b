-- The highest sequence of one collector run in the ledger, and its number of batches.
SELECT max(sequence), count() FROM ingest_batches WHERE host = %(host)s AND run_id = %(run)s
