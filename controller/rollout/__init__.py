"""Configs from desired state: generate, validate, sign, publish, staged rollout, statuses."""

__all__ = [
    "cli",
    "engine",
    "generate",
    "publish",
    "records",
    "settings",
    "signing",
    "sinks",
    "state",
    "statuses",
    "validate",
]
