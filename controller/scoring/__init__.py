"""Per-prefix scoring: queries over the telemetry tables, decisions, desired state, explain."""

__all__: list[str] = []
