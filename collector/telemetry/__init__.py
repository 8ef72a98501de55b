"""`dyncc collect`: poll sock_diag, filter, encode TcpInfoBatch batches, send them to a sink."""

__all__ = [
    "cli",
    "filters",
    "kafka_producer",
    "metrics",
    "poller",
    "prefetch",
    "prefixes",
    "runner",
    "settings",
    "sinks",
    "start",
    "timeline",
]
