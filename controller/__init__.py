"""dyncc central side: ingest, scoring, evidence, config generation, rollout, reports."""
