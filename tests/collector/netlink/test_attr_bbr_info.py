"""attr_bbr_info: xtcp2's INET_DIAG_BBRINFO captures decode to the values xtcp2 asserts;
short attributes are counted and dropped, long ones read their first 20 bytes."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from collector.netlink import attr_bbr_info
from collector.netlink.attr_bbr_info import BBR_COLUMNS, BBR_INFO_LEN, INET_DIAG_BBRINFO
from collector.netlink.sockdiag_parse import ErrorCounts
from tests.support.netlink_attrs import attribute_files, expected, key, layout, read_attr, require_xtcp2, row


def decode(payloads: list[bytes | None]) -> tuple[list[dict[str, int]], ErrorCounts]:
    errors = ErrorCounts()
    cols = attr_bbr_info.decode(*layout(payloads), errors)
    assert set(cols) == set(BBR_COLUMNS)
    return [row(cols, i) for i in range(len(payloads))], errors


def test_xtcp2_bbrinfo_attributes() -> None:
    require_xtcp2()
    files = attribute_files("attribute_bbrinfo")
    assert len(files) >= 4
    checked = 0
    for path in files:
        rta_type, payload = read_attr(path)
        assert rta_type == INET_DIAG_BBRINFO
        assert len(payload) == BBR_INFO_LEN
        rows, errors = decode([payload])
        got = rows[0]
        assert not errors and got["has_bbr_info"] == 1
        want = expected().get(key(path), {}).get("bbr_info")
        if want is None:
            continue
        checked += 1
        assert got == {
            "has_bbr_info": 1,
            "bbr_bw": want["BwHi"] << 32 | want["BwLo"],
            "bbr_min_rtt": want["MinRtt"],
            "bbr_pacing_gain": want["PacingGain"],
            "bbr_cwnd_gain": want["CwndGain"],
        }, key(path)
    assert checked >= 3


@given(st.lists(st.one_of(st.none(), st.binary(max_size=48)), min_size=1, max_size=8))
def test_any_payloads(payloads: list[bytes | None]) -> None:
    rows, errors = decode(payloads)
    short = sum(1 for p in payloads if p is not None and len(p) < BBR_INFO_LEN)
    assert errors["short_bbr_info"] == short
    assert sum(errors.values()) == short
    for p, got in zip(payloads, rows, strict=True):
        if p is None or len(p) < BBR_INFO_LEN:
            assert got == dict.fromkeys(BBR_COLUMNS, 0)
            continue
        lo, hi, min_rtt, pacing, cwnd = struct.unpack_from("<5I", p)
        assert got == {
            "has_bbr_info": 1,
            "bbr_bw": hi << 32 | lo,
            "bbr_min_rtt": min_rtt,
            "bbr_pacing_gain": pacing,
            "bbr_cwnd_gain": cwnd,
        }
