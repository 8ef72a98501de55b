"""The kernel ABI: netlink constants, the sock_diag dump and parse, the rtnetlink route codec.

Import-light on purpose (no numpy here): `dyncc collect --once` starts its dump before numpy loads."""

__all__ = [
    "abi",
    "attr_bbr_info",
    "attr_cong",
    "attr_skmeminfo",
    "attr_tcp_info",
    "gather",
    "rtnetlink",
    "sockdiag",
    "sockdiag_dump",
    "sockdiag_parse",
]
