"""dyncc edge side: netlink (kernel ABI), telemetry (`dyncc collect`), agent (`dyncc agent`)."""

__all__ = [
    "agent",
    "netlink",
    "telemetry",
]
