"""Tests of dyncc.lab."""
