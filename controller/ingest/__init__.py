"""`dyncc ingest`: load TcpInfoBatch batches from Kafka (or files) into the store exactly once."""

__all__ = [
    "cli",
    "columns",
    "files",
    "kafka",
    "metrics",
    "sequence",
    "settings",
    "writer",
]
