"""Test data recorded on real kernels (see netlink/README.md) and the scripts that record it."""
