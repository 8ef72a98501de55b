"""Per-prefix scoring: queries over the telemetry tables, decisions, desired state, explain."""
