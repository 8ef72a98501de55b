"""Tests of controller.scoring."""
