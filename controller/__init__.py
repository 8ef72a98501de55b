"""dyncc central side: ingest, scoring, config generation, rollout, reports."""
