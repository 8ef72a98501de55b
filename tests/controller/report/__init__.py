"""Tests of controller.report."""
