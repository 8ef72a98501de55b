"""collector.netlink.abi: the kernel's netlink constants, defined once for sock_diag and rtnetlink."""

from __future__ import annotations

import ast
from pathlib import Path

from collector.netlink import abi

REPO = Path(__file__).resolve().parents[3]

# linux/netlink.h (and socket(7): SOL_NETLINK)
KERNEL = {
    "NLMSG_HDRLEN": 16,
    "NLMSG_ERROR": 2,
    "NLMSG_DONE": 3,
    "NLM_F_REQUEST": 0x1,
    "NLM_F_MULTI": 0x2,
    "NLM_F_ACK": 0x4,
    "NLM_F_DUMP_INTR": 0x10,
    "NLM_F_DUMP": 0x300,
    "NLM_F_REPLACE": 0x100,
    "NLM_F_EXCL": 0x200,
    "NLM_F_CREATE": 0x400,
    "NLM_F_ACK_TLVS": 0x200,
    "NLM_F_CAPPED": 0x100,
    "SOL_NETLINK": 270,
    "NETLINK_CAP_ACK": 10,
    "NETLINK_EXT_ACK": 11,
    "NETLINK_GET_STRICT_CHK": 12,
    "NLMSGERR_ATTR_MSG": 1,
}


def test_values_are_the_kernels() -> None:
    assert {name: getattr(abi, name) for name in KERNEL} == KERNEL
    assert abi.NLMSGHDR.size == abi.NLMSG_HDRLEN
    assert set(abi.__all__) == {*KERNEL, "NLMSGHDR"}


def test_no_other_product_module_defines_them() -> None:
    for path in sorted((REPO / "collector").rglob("*.py")):
        if path.name == "abi.py":
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign):
                names = {t.id for t in node.targets if isinstance(t, ast.Name)}
                assert not names & {*KERNEL, "NLMSGHDR"}, f"{path.relative_to(REPO)}:{node.lineno} redefines {names}"
