"""Tests of collector.telemetry."""
