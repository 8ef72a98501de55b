"""`dyncc agent`: apply signed per-prefix congestion configs as routes, report statuses."""

__all__ = [
    "apply",
    "cli",
    "core",
    "events",
    "health",
    "kafka",
    "plan",
    "routes",
    "settings",
    "state",
]
