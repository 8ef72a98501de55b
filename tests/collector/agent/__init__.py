"""Tests of collector.agent."""
