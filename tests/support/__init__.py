"""Test helpers: servers, synthetic data, message builders (imported by tests and bench only)."""
