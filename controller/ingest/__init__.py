"""`dyncc ingest`: load TcpInfoBatch batches from Kafka (or files) into the store exactly once;
`dyncc access-log`: load nginx access logs into http_requests, deduplicated."""

__all__ = [
    "access_loader",
    "access_log",
    "access_log_cli",
    "cli",
    "columns",
    "files",
    "kafka",
    "metrics",
    "sequence",
    "settings",
    "writer",
]
