"""Tests of collector.netlink."""
