"""Configs from desired state: generate, validate, sign, publish, staged rollout, statuses."""

__all__: list[str] = []
