"""Tests of controller.ingest."""
