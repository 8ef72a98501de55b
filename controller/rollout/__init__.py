"""Configs from desired state: generate, validate, sign, publish, staged rollout, statuses."""
