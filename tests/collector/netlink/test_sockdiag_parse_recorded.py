"""dyncc's netlink parser on real kernel dumps recorded into testdata/netlink beside this file, checked with ss.

Each snapshot is a pcap of one IPv4 and one IPv6 SOCK_DIAG_BY_FAMILY dump plus
the text iproute2's ss printed for exactly those replies (recorded by
tests/collector/netlink/testdata/record_netlink.py; meta.json says which kernel and ss).  Every
message must decode, with no error but the tcp_info TIME-WAIT sockets lack,
and every socket must equal its ss line (matched by cookie) in state,
addresses, ports, uid, inode, congestion name, skmem and every tcp_info / BBR
field ss prints (tests/support/ss_oracle.py).

The same real messages feed the malformed-input properties: cut short
anywhere, or with an attribute length garbled, a message never makes the
parser raise and the damage is counted (`bad_attribute`, `short_message`).
These run everywhere: the recordings are part of the repository.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.netlink.sockdiag_parse import ErrorCounts
from tests.support.netlink_msgs import (
    attributes,
    check_nla_len,
    check_truncated,
    decoded,
    diag_messages,
    parse_datagrams,
    reply_dumps,
    truncated,
)
from tests.support.netlink_pcap import PACKET_HOST, PACKET_OUTGOING, read_pcap, write_pcap
from tests.support.ss_oracle import SS_STATE, compare, parse_ss

RECORDINGS = Path(__file__).resolve().parent / "testdata" / "netlink"
SNAPSHOTS = sorted(RECORDINGS.glob("*/*.pcap"))
TIME_WAIT = 6


def snapshot_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def test_recordings_exist() -> None:
    """At least one kernel recorded, each snapshot with its ss text and listed in meta.json."""
    assert SNAPSHOTS, "no recordings: run tests/collector/netlink/testdata/record_netlink.py"
    for kernel_dir in {p.parent for p in SNAPSHOTS}:
        meta = json.loads((kernel_dir / "meta.json").read_text())
        assert meta["kernel"] == kernel_dir.name
        assert set(meta["snapshots"]) == {p.stem for p in kernel_dir.glob("*.pcap")}
        for name, info in meta["snapshots"].items():
            text = (kernel_dir / f"{name}.ss.txt").read_text()
            assert len(text.splitlines()) == info["sockets"]


@cache
def snapshot(path: Path) -> list[list[bytes]]:
    packets = read_pcap(path.read_bytes())
    assert {(p.protocol, p.truncated) for p in packets} == {(4, False)}
    assert [p.pkttype for p in packets if p.pkttype == PACKET_OUTGOING] == [PACKET_OUTGOING] * 2
    return reply_dumps(p.payload for p in packets if p.pkttype == PACKET_HOST)


@pytest.mark.parametrize("path", SNAPSHOTS, ids=snapshot_id)
def test_recorded_dump_equals_ss(path: Path) -> None:
    dumps = snapshot(path)
    assert len(dumps) == 2  # IPv4, IPv6
    socks = parse_ss(path.with_suffix(".ss.txt").read_text())
    printed = {key for s in socks for key in s.info}
    by_cookie = {s.cookie: s for s in socks}
    assert None not in by_cookie and len(by_cookie) == len(socks)
    problems: list[str] = []
    for family, dump in zip((2, 10), dumps, strict=True):
        errors = ErrorCounts()
        parsed, done = parse_datagrams(dump, errors)
        c = parsed.columns
        assert done
        assert parsed.rows == len(diag_messages(dump))
        assert set(c["family"].tolist()) == {family}
        no_info = c["tcp_info_len"] == 0
        assert np.all(c["state"][no_info] == TIME_WAIT)
        assert +errors == Counter({"missing_tcp_info": int(no_info.sum())} if no_info.any() else {})
        for row in range(parsed.rows):
            sock = by_cookie.pop(int(c["cookie"][row]))
            problems += [f"{sock.local} {sock.peer}: {b}" for b in compare(sock, parsed, row, printed_keys=printed)]
    assert problems == []
    assert by_cookie == {}, "ss shows sockets the parser did not produce"


def test_recordings_cover_states_and_algorithms() -> None:
    """The recordings exercise what they were made for (a re-recording that lost a case fails)."""
    states: set[str] = set()
    ccs: set[str] = set()
    for path in SNAPSHOTS:
        for sock in parse_ss(path.with_suffix(".ss.txt").read_text()):
            states.add(sock.state)
            ccs.add(sock.cc)
    assert {"LISTEN", "ESTAB", "TIME-WAIT", "FIN-WAIT-2", "CLOSE-WAIT"} <= states <= set(SS_STATE.values())
    assert {"cubic", "bbr", "reno"} <= ccs


def test_pcap_round_trip() -> None:
    """write_pcap / read_pcap agree (the recorder and the tests share one format)."""
    packets = read_pcap(SNAPSHOTS[0].read_bytes())
    again = read_pcap(write_pcap(packets, [1.5] * len(packets)))
    assert again == packets


# ---------------------------------------------------------------- malformed variants of real messages


@cache
def recorded_messages() -> list[bytes]:
    """Every recorded SOCK_DIAG message with attributes (TIME-WAIT ones have none)."""
    return [m for path in SNAPSHOTS for dump in snapshot(path) for m in diag_messages(dump) if attributes(m)]


def test_attribute_header_cut_short_is_counted() -> None:
    """A message ending 1-3 bytes into an attribute header: the attribute is lost and counted.

    (Before the fix the parser took the 1-3 bytes for padding and dropped the
    attribute silently; kernel attribute chains always end exactly at nlmsg_len.)
    """
    msg = max(recorded_messages(), key=lambda m: len(attributes(m)))
    for attr in attributes(msg)[1:]:
        for into in (1, 2, 3):
            check_truncated(msg, attr.start + into)
            _, _, errors = decoded(truncated(msg, attr.start + into))
            assert errors.get("bad_attribute") == 1


def test_every_attribute_boundary_cut_is_clean() -> None:
    """Cut exactly after an attribute (padding included or not): no error, the rest is just absent."""
    msg = max(recorded_messages(), key=lambda m: len(attributes(m)))
    for attr in attributes(msg):
        for cut in sorted({attr.end, (attr.end + 3) & ~3}):
            if cut < len(msg):
                check_truncated(msg, cut)
                _, _, errors = decoded(truncated(msg, cut))
                assert "bad_attribute" not in errors


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(min_value=0), cut=st.integers(min_value=0))
def test_truncated_messages_never_raise_and_are_counted(index: int, cut: int) -> None:
    msgs = recorded_messages()
    msg = msgs[index % len(msgs)]
    check_truncated(msg, 16 + cut % (len(msg) - 16))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    index=st.integers(min_value=0),
    which=st.integers(min_value=0),
    nla_len=st.one_of(st.integers(0, 8), st.integers(0, 512), st.integers(0, 0xFFFF)),
)
def test_garbled_attribute_lengths_never_raise_and_are_counted(index: int, which: int, nla_len: int) -> None:
    msgs = recorded_messages()
    msg = msgs[index % len(msgs)]
    check_nla_len(msg, which % len(attributes(msg)), nla_len)
