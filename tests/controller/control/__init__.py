"""Tests of controller.control."""
