"""The kernel ABI: netlink constants, the sock_diag dump and parse, the rtnetlink route codec.

Import-light on purpose (no numpy here): `dyncc collect --once` starts its dump before numpy loads."""
