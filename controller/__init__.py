"""dyncc central side: ingest, scoring, config generation, rollout, reports."""

__all__ = [
    "cli",
    "control",
    "ingest",
    "lab",
    "report",
    "rollout",
    "scoring",
    "store",
]
