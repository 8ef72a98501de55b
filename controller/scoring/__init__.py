"""Per-prefix scoring: queries over the telemetry tables, decisions, desired state, explain."""

__all__ = [
    "decide",
    "desired",
    "explain",
    "query",
    "round",
    "settings",
    "state",
]
