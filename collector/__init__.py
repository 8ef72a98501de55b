"""dyncc edge side: netlink (kernel ABI), telemetry (`dyncc collect`), agent (`dyncc agent`)."""
