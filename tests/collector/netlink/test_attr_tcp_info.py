"""attr_tcp_info: xtcp2's INET_DIAG_INFO captures of six kernels decode to the values xtcp2 asserts
and to the kernel's sizeof(struct tcp_info); any payload length keeps exactly the whole words it holds."""

from __future__ import annotations

import re
import struct

from hypothesis import given
from hypothesis import strategies as st

from collector.netlink import attr_tcp_info
from collector.netlink.attr_tcp_info import (
    APP_LIMITED_BYTE,
    BITFIELD_COLUMNS,
    FIELDS,
    INET_DIAG_INFO,
    TCP_INFO_MAX,
    WSCALE_BYTE,
)
from collector.netlink.sockdiag_parse import ErrorCounts
from tests.support.netlink_attrs import (
    XTCP2,
    attribute_files,
    expected,
    key,
    layout,
    read_attr,
    require_xtcp2,
    row,
)

#: sizeof(struct tcp_info) by kernel (the fields each release appended; see attr_tcp_info's table).
KERNEL_LEN = {(4, 19): 224, (5, 4): 232, (5, 15): 232, (6, 1): 232, (6, 6): 240, (6, 8): 248, (6, 10): 248}
#: xtcp2's Go names whose snake_case differs from the column name; State/FastopenClientFail are not columns.
RENAMED = {
    "AdvMss": "advmss",
    "NotSentBytes": "notsent_bytes",
    "DeliveryRateAppLimited": "app_limited",
    "TotalRTO": "total_rto",
    "TotalRTORecoveries": "total_rto_recoveries",
    "TotalRTOTime": "total_rto_time",
}
NOT_COLUMNS = {"State", "FastopenClientFail"}
_FMT = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}


def column(go_name: str) -> str:
    return RENAMED.get(go_name) or re.sub(r"(?<!^)(?=[A-Z])", "_", go_name).lower()


def decode(payloads: list[bytes | None]) -> tuple[list[dict[str, int]], ErrorCounts]:
    errors = ErrorCounts()
    cols = attr_tcp_info.decode(*layout(payloads), errors)
    assert set(cols) == {"tcp_info_len", *BITFIELD_COLUMNS, *(name for name, _, _ in FIELDS)}
    return [row(cols, i) for i in range(len(payloads))], errors


def oracle(p: bytes) -> dict[str, int]:
    """The columns by struct.unpack of the whole words present (first TCP_INFO_MAX bytes)."""
    valid = min(len(p), TCP_INFO_MAX) // 4 * 4
    data = p[:valid] + bytes(TCP_INFO_MAX - valid)
    want = {name: struct.unpack_from(_FMT[size], data, off)[0] for name, off, size in FIELDS}
    want["snd_wscale"] = data[WSCALE_BYTE] & 0x0F
    want["rcv_wscale"] = data[WSCALE_BYTE] >> 4
    want["app_limited"] = data[APP_LIMITED_BYTE] & 0x01
    want["tcp_info_len"] = len(p)
    return want


def test_xtcp2_info_attributes_per_kernel() -> None:
    require_xtcp2()
    files = attribute_files("attribute_info")
    kernels = set()
    for path in files:
        rta_type, payload = read_attr(path)
        assert rta_type == INET_DIAG_INFO
        major, minor, _patch = path.parent.name.split("_")  # the kernel folder, e.g. 6_10_3
        release = (int(major), int(minor))
        kernels.add(release)
        assert len(payload) == KERNEL_LEN[release], key(path)
        [got], errors = decode([payload])
        assert not errors
        assert got == oracle(payload), key(path)
        if payload[0] == 1:  # tcpi_state ESTABLISHED (the others here are listeners: rto 0)
            assert got["snd_mss"] > 0 and got["rto"] > 0 and got["pmtu"] > 0, key(path)
    assert len(kernels) >= 6


def test_xtcp2_info_values() -> None:
    require_xtcp2()
    checked = 0
    for name, entry in expected().items():
        want = entry.get("tcp_info")
        if want is None:
            continue
        rta_type, payload = read_attr(XTCP2 / name)
        assert rta_type == INET_DIAG_INFO
        [got], errors = decode([payload])
        assert not errors
        compared = {column(k): v for k, v in want.items() if k not in NOT_COLUMNS}
        assert {k: got[k] for k in compared} == compared, name
        assert len(compared) >= 50
        checked += 1
    assert checked >= 6


def test_absent_attribute_is_counted() -> None:
    rows, errors = decode([None, b"\x01" * 104, None])
    assert errors == {"missing_tcp_info": 2}
    assert rows[0]["tcp_info_len"] == 0 and rows[0]["snd_mss"] == 0
    assert rows[1]["tcp_info_len"] == 104 and rows[1]["total_retrans"] == 0x01010101


@given(st.lists(st.one_of(st.none(), st.binary(max_size=300)), min_size=1, max_size=6))
def test_any_length(payloads: list[bytes | None]) -> None:
    rows, errors = decode(payloads)
    assert errors["missing_tcp_info"] == payloads.count(None)
    assert sum(errors.values()) == payloads.count(None)
    for p, got in zip(payloads, rows, strict=True):
        if p is None:
            assert set(got.values()) == {0}
        else:
            assert got == oracle(p)
