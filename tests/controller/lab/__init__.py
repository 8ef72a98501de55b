"""Tests of controller.lab."""
