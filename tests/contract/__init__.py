"""Tests of contract."""
