"""attr_skmeminfo: xtcp2's INET_DIAG_SKMEMINFO captures decode to the values xtcp2 asserts (and
to those their file names spell); short arrays read 0 past their end, long ones keep nine words."""

from __future__ import annotations

import re
import struct

from hypothesis import given
from hypothesis import strategies as st

from collector.netlink import attr_skmeminfo
from collector.netlink.attr_skmeminfo import INET_DIAG_SKMEMINFO, SKMEM_COLUMNS, SKMEM_WORDS
from tests.support.netlink_attrs import attribute_files, expected, key, layout, read_attr, require_xtcp2, row

#: EXPECTED.json's names (xtcp2's Go struct) for the SK_MEMINFO_* columns, in kernel order.
XTCP2_NAMES = ("RmemAlloc", "RcvBuf", "WmemAlloc", "SndBuf", "FwdAlloc", "WmemQueued", "Optmem", "Backlog", "Drops")
#: Buffer sizes spelled in the fixture file names, e.g. attribute_skmeminfo_rb1000000_sb2626560.
#: ('forward' is not used: 4_19_319's "..._forward2096" holds fwd_alloc 4096, like 5_4_281's "..._forward4096".)
NAME_HINTS = {"send": "skmem_sndbuf", "sb": "skmem_sndbuf", "rb": "skmem_rcvbuf"}


def decode(payloads: list[bytes | None]) -> list[dict[str, int]]:
    cols = attr_skmeminfo.decode(*layout(payloads))
    assert set(cols) == set(SKMEM_COLUMNS)
    return [row(cols, i) for i in range(len(payloads))]


def test_xtcp2_skmeminfo_attributes() -> None:
    require_xtcp2()
    files = attribute_files("attribute_skmeminfo")
    assert len(files) >= 6
    from_json = from_name = 0
    for path in files:
        rta_type, payload = read_attr(path)
        assert rta_type == INET_DIAG_SKMEMINFO
        assert len(payload) == 4 * SKMEM_WORDS
        got = decode([payload])[0]
        want = expected().get(key(path), {}).get("skmeminfo")
        if want is not None:
            from_json += 1
            assert got == {col: want[name] for col, name in zip(SKMEM_COLUMNS, XTCP2_NAMES, strict=True)}, key(path)
        for hint, value in re.findall(r"_([a-z]+?)(\d+)", path.name):
            if hint not in NAME_HINTS:
                continue
            from_name += 1
            assert got[NAME_HINTS[hint]] == int(value), key(path)
    assert from_json >= 3 and from_name >= 4


@given(st.lists(st.one_of(st.none(), st.binary(max_size=48)), min_size=1, max_size=8))
def test_any_payloads(payloads: list[bytes | None]) -> None:
    for p, got in zip(payloads, decode(payloads), strict=True):
        words = [] if p is None else list(struct.unpack_from(f"<{min(len(p) // 4, SKMEM_WORDS)}I", p))
        words += [0] * (SKMEM_WORDS - len(words))
        assert got == dict(zip(SKMEM_COLUMNS, words, strict=True))
