"""Tests of dyncc_common."""
