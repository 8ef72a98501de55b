"""Tests of controller.store."""
