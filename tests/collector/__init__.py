"""Tests of collector."""
