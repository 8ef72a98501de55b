"""`dyncc lab` and `dyncc demo`: the whole loop on namespaces or a recording."""

__all__ = [
    "agent",
    "cli",
    "control",
    "demo",
    "loop",
    "pipeline",
    "replay",
    "run",
    "table",
    "telemetry",
    "topology",
    "traffic",
]
