"""`dyncc ingest`: load TcpInfoBatch batches from Kafka (or files) into the store exactly once;
`dyncc access-log`: load nginx access logs into http_requests, deduplicated."""
