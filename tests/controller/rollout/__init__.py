"""Tests of controller.rollout."""
