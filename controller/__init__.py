"""dyncc central side: ingest, scoring, evidence, config generation, rollout, reports."""

__all__ = [
    "control",
    "evidence",
    "ingest",
    "report",
    "rollout",
    "scoring",
    "store",
]
