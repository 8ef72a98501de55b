"""Generic netlink ABI constants (linux/netlink.h), the one copy for sock_diag and rtnetlink.

Values are the kernel's and never change; tests/collector/netlink/test_abi.py pins them.
Stdlib only (struct), so the numpy-free start-up path of `dyncc collect --once` can import it.
"""

from __future__ import annotations

import struct

__all__ = [
    "NETLINK_CAP_ACK",
    "NETLINK_EXT_ACK",
    "NETLINK_GET_STRICT_CHK",
    "NLMSGERR_ATTR_MSG",
    "NLMSGHDR",
    "NLMSG_DONE",
    "NLMSG_ERROR",
    "NLMSG_HDRLEN",
    "NLM_F_ACK",
    "NLM_F_ACK_TLVS",
    "NLM_F_CAPPED",
    "NLM_F_CREATE",
    "NLM_F_DUMP",
    "NLM_F_DUMP_INTR",
    "NLM_F_EXCL",
    "NLM_F_MULTI",
    "NLM_F_REPLACE",
    "NLM_F_REQUEST",
    "SOL_NETLINK",
]

#: struct nlmsghdr: len, type, flags, seq, pid.
NLMSGHDR = struct.Struct("=IHHII")
NLMSG_HDRLEN = 16

# message types
NLMSG_ERROR = 2
NLMSG_DONE = 3

# nlmsg_flags
NLM_F_REQUEST = 0x1
NLM_F_MULTI = 0x2
NLM_F_ACK = 0x4
NLM_F_DUMP_INTR = 0x10
NLM_F_DUMP = 0x300
# modifiers of a NEW request
NLM_F_REPLACE = 0x100
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
# in an ack
NLM_F_ACK_TLVS = 0x200  # extended-ack TLVs follow
NLM_F_CAPPED = 0x100  # the request was not echoed

# socket options (level SOL_NETLINK)
SOL_NETLINK = 270
NETLINK_CAP_ACK = 10
NETLINK_EXT_ACK = 11
NETLINK_GET_STRICT_CHK = 12

# extended-ack attributes
NLMSGERR_ATTR_MSG = 1
