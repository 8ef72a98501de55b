"""dyncc's netlink parser on third-party kernel captures (xtcp2: kernels 4.19-7.0.3; m-lab/tcp-info).

The captures live outside the repository, in `../shared/fixtures` (third-party
data: read from there, never copied in); its README.md documents every file
and each folder's EXPECTED.json the values the owners' own tests assert.
The module is skipped only when that folder is absent.

What is checked, with dyncc's real parser (collector.netlink.sockdiag_parse):
  * every SOCK_DIAG message of every pcap and raw netlink file is decoded:
    row counts, address families, tcp_info lengths and congestion names
    equal the README's index, and the only error is `missing_tcp_info` on
    timewait minisockets (the kernel sends no tcp_info for them);
  * decoded values equal the `ss -tie` text xtcp2 captured with the same dump
    (matched by socket cookie, or by addresses and ports where ss ran
    without -e): state, addresses, ports, uid, inode, cookie, congestion
    name, skmem, and every tcp_info / BBR field ss prints, compared as ss
    formats them (tests/support/ss_oracle.py);
  * the first message of each reply capture and each single-attribute file
    equal EXPECTED.json (tcp_info, congestion name, BBR info, skmeminfo);
    attributes dyncc does not decode are walked over without effect;
  * m-lab's 420 raw messages and their JSONL archive decode to the same
    columns, and the other JSONL files give the values m-lab asserts;
  * hypothesis: real messages from every kernel, truncated anywhere or with a
    garbled attribute length, never raise and are counted as malformed.

Fixture quirks (none is a parser bug) are documented where they are handled:
  * PAIRS: several pcaps hold more than one ss run; the text shows one of them,
    and 6_6_44's 10-socket text is of a later run than its pcap (only the
    listeners are in both); 7_0_3's text has no cookies;
  * vegas_rtt: for vegas sockets ss computes `send` from tcpvegas_info, which
    dyncc does not decode;
  * TIMEWAIT_STATES: timewait minisockets report TIME-WAIT or FIN-WAIT-2 (their
    substate) and carry no tcp_info (m-lab's finwait2 sample has one);
  * assert_request_layout: captured requests differ from dyncc's only in
    nlmsg_pid and the (ignored) cookie;
  * mlab_raw: testdata.zst is six dumps back to back, each with its own seq/pid.
"""

from __future__ import annotations

import ast
import base64
import json
import re
import struct
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.netlink.sockdiag import build_request, walk_messages
from collector.netlink.sockdiag_parse import ErrorCounts, Parsed, parse_messages
from tests.support.netlink_msgs import (
    Attr,
    attr_payload,
    attributes,
    check_nla_len,
    check_truncated,
    decoded,
    diag_message,
    diag_messages,
    is_request,
    messages,
    msg_type,
    parse_datagrams,
    reply_dumps,
)
from tests.support.netlink_pcap import COOKED_LEN, read_pcap, rtattr
from tests.support.ss_oracle import addr_key, compare, parse_ss

FIXTURES = Path(__file__).resolve().parents[3] / ".." / "shared" / "fixtures"
if not FIXTURES.is_dir():
    pytest.skip(
        "third-party netlink fixtures absent: ../shared/fixtures (next to the repository) does not exist",
        allow_module_level=True,
    )
XTCP2 = FIXTURES / "xtcp2"
MLAB = FIXTURES / "m-lab-tcp-info"

INET_DIAG_VEGASINFO = 3
#: States of timewait minisockets (idiag_state is their tw_substate): the kernel sends them without tcp_info.
TIMEWAIT_STATES = (5, 6)  # FIN-WAIT-2, TIME-WAIT


# ---------------------------------------------------------------- fixture index


@cache
def readme_index() -> dict[str, tuple[str, str]]:
    """README.md's xtcp2 file index: path -> (format, content)."""
    rows: dict[str, tuple[str, str]] = {}
    for line in (FIXTURES / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1].isdigit():
            rows[cells[0]] = (cells[2], cells[3])
    assert rows, "README.md has no file index"
    return rows


@cache
def xtcp2_expected() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((XTCP2 / "EXPECTED.json").read_text())
    return data


def rel(path: Path) -> str:
    return path.relative_to(XTCP2).as_posix()


PCAPS = sorted(XTCP2.rglob("*.pcap"))
ATTRIBUTE_FILES = sorted(p for p in XTCP2.rglob("*") if readme_index().get(rel(p), ("",))[0] == "rtattr")
RAW_FILES = sorted(p for p in XTCP2.rglob("*") if readme_index().get(rel(p), ("",))[0].startswith("raw netlink"))


def test_fixture_set_is_the_documented_one() -> None:
    """Every capture is in the README index and the other way round (a changed set fails here)."""
    index = readme_index()
    on_disk = {rel(p) for p in XTCP2.rglob("*") if p.is_file() and p.name != "EXPECTED.json"}
    assert on_disk == set(index)
    assert len(PCAPS) == sum(1 for fmt, _ in index.values() if fmt == "pcap") == 49


# ---------------------------------------------------------------- decoding every message


@dataclass
class Dump:
    datagrams: list[bytes]
    parsed: Parsed
    errors: dict[str, int]
    done: bool
    messages: list[bytes]  # the SOCK_DIAG messages, in row order


def decode_dump(datagrams: list[bytes]) -> Dump:
    errors = ErrorCounts()
    parsed, done = parse_datagrams(datagrams, errors)
    msgs = diag_messages(datagrams)
    return Dump(datagrams, parsed, {k: v for k, v in errors.items() if v}, done, msgs)


@cache
def pcap_dumps(path: Path) -> list[Dump]:
    """The reply dumps of a pcap (NETLINK_SOCK_DIAG packets only), decoded."""
    packets = read_pcap(path.read_bytes())
    assert not any(p.truncated for p in packets), "a record was cut by the capture's snaplen"
    return [decode_dump(d) for d in reply_dumps(p.payload for p in packets if p.protocol == 4)]


def timewait_errors(parsed: Parsed) -> dict[str, int]:
    """The errors a clean dump has: `missing_tcp_info` for timewait minisockets, nothing else."""
    c = parsed.columns
    no_info = c["tcp_info_len"] == 0
    assert np.all(np.isin(c["state"][no_info], TIMEWAIT_STATES)), "tcp_info missing on a full socket"
    return {"missing_tcp_info": int(no_info.sum())} if no_info.any() else {}


def assert_clean(dump: Dump) -> None:
    """All messages became rows; the only error is the tcp_info timewait minisockets lack."""
    assert dump.parsed.rows == len(dump.messages)
    assert dump.errors == timewait_errors(dump.parsed)
    ends_with_done = any(msg_type(m) == 3 for m in messages(dump.datagrams[-1]))
    assert dump.done == ends_with_done


def histograms(dumps: list[Dump]) -> dict[str, Any]:
    fam: Counter[int] = Counter()
    lens: Counter[int] = Counter()
    cc: Counter[str] = Counter()
    rows = 0
    for d in dumps:
        c = d.parsed.columns
        rows += d.parsed.rows
        fam.update(c["family"].tolist())
        lens.update(v for v in c["tcp_info_len"].tolist() if v)
        cc.update(n for n in (d.parsed.cc_names[i] for i in c["cc_index"].tolist()) if n)
    return {"rows": rows, "v4": fam[2], "v6": fam[10], "tcp_info len": dict(lens), "cc": dict(cc)}


_PCAP_ROW = re.compile(r"(\d+) diag msgs \(v4 (\d+), v6 (\d+)\); tcp_info len (\{.*?\}); cc (\{.*?\})")


@pytest.mark.parametrize("path", PCAPS, ids=rel)
def test_every_pcap_message_is_decoded(path: Path) -> None:
    dumps = pcap_dumps(path)
    for dump in dumps:
        assert_clean(dump)
    match = _PCAP_ROW.fullmatch(readme_index()[rel(path)][1])
    assert match, readme_index()[rel(path)]
    documented = {
        "rows": int(match[1]),
        "v4": int(match[2]),
        "v6": int(match[3]),
        "tcp_info len": ast.literal_eval(match[4]),
        "cc": ast.literal_eval(match[5]),
    }
    assert histograms(dumps) == documented


_RAW_ROW = re.compile(r"(\d+) nlmsgs types (\{.*\})")


@pytest.mark.parametrize("path", RAW_FILES, ids=rel)
def test_every_raw_netlink_file_is_decoded(path: Path) -> None:
    """Raw buffers (one recv() each): replies decode whole; requests match dyncc's own request layout."""
    data = path.read_bytes()
    fmt, content = readme_index()[rel(path)]
    if fmt == "raw netlink (truncated)":
        # NLMSG_DONE whose 4-byte status was cut off: counted, never a crash
        errors = ErrorCounts()
        parsed, done = parse_datagrams([data], errors)
        assert (parsed.rows, done, +errors) == (0, False, Counter({"truncated_message": 1}))
        return
    match = _RAW_ROW.fullmatch(content)
    assert match, content
    msgs = messages(data)
    assert len(msgs) == int(match[1])
    assert dict(Counter(msg_type(m) for m in msgs)) == ast.literal_eval(match[2])
    if is_request(data):
        assert_request_layout(data)
        return
    dump = decode_dump([data])
    assert_clean(dump)
    assert dump.parsed.rows == sum(1 for m in msgs if msg_type(m) == 20)


def assert_request_layout(req: bytes) -> None:
    """A captured inet_diag_req_v2 dump request re-encodes byte for byte with dyncc's build_request.

    Two fields differ by design: nlmsg_pid (dyncc leaves 0 for the kernel to fill, some tools
    put their port id) and the cookie (dyncc asks with INET_DIAG_NOCOOKIE, all ones, the
    captured tools with zeros; for a dump the kernel ignores it).
    """
    assert len(req) == 72 and struct.unpack_from("<H", req, 4)[0] == 20
    seq = struct.unpack_from("<I", req, 8)[0]
    family, _protocol, ext, _pad, states = struct.unpack_from("<BBBBI", req, 16)
    ours = build_request(family, states, ext, seq)
    assert ours[:12] == req[:12]  # length, type, flags, seq
    assert ours[16:64] == req[16:64]  # family, protocol, ext, states, socket id
    assert ours[64:] == b"\xff" * 8


def test_captured_requests_match_dyncc_requests() -> None:
    """Every request in the pcaps (iproute2 ss and xtcp2) has dyncc's layout."""
    seen = 0
    for path in PCAPS:
        for pkt in read_pcap(path.read_bytes()):
            if pkt.protocol == 4 and is_request(pkt.payload):
                assert_request_layout(pkt.payload)
                seen += 1
    assert seen == 70


def test_cooked_header_fixture() -> None:
    """xtcp2's sample LINKTYPE_NETLINK pseudo-header is what the pcap reader expects."""
    raw = (XTCP2 / "6_6_44" / "netlink_cooked_header").read_bytes()
    assert len(raw) == COOKED_LEN
    pkttype, hatype, _alen = struct.unpack_from(">HHH", raw)
    (protocol,) = struct.unpack_from(">H", raw, 14)
    assert (pkttype, hatype, protocol) == (4, 824, 4)


# ---------------------------------------------------------------- values equal to ss


@dataclass(frozen=True)
class Pair:
    pcap: str
    text: str
    dumps: tuple[int, ...]  # which reply dumps of the pcap the text shows
    by: str = "cookie"  # or "address": ss ran without -e, so no sk: cookie
    expect_matches: int | None = None  # None: every socket on both sides must match
    note: str = ""


def _pair(kernel: str, n: int) -> Pair:
    return Pair(f"{kernel}/{kernel}_tcp_{n}_sockets.pcap", f"{kernel}/{kernel}_ss_tcp_info_a_{n}", (0, 1))


# Each `ss -ti` run is an IPv4 then an IPv6 dump; `dumps` names the run the text shows.
PAIRS = [
    *(_pair(k, n) for k in ("4_19_319", "5_4_281", "5_15_164", "6_1_103", "6_8_12", "6_10_3") for n in (10, 100)),
    _pair("6_10_3", 1000),
    Pair("6_6_44/ss_tcp_info_a_4.pcap", "6_6_44/ss_tcp_info_a_4", (0, 1)),
    Pair(
        "6_6_44/tcp_100_sockets.pcap",
        "6_6_44/ss_tcp_info_a_100",
        (4, 5),
        note="the pcap holds three ss runs; the text is the third (the others show earlier counters)",
    ),
    Pair("6_6_44/tcp_100_sockets_bbr.pcap", "6_6_44/ss_tcp_info_a_100_bbr", (2, 3), note="text of the second run"),
    Pair("6_6_44/tcp_100_sockets_dctcp.pcap", "6_6_44/ss_tcp_info_a_100_dctcp", (2, 3), note="text of the second run"),
    Pair("6_6_44/tcp_100_sockets_vegas.pcap", "6_6_44/ss_tcp_info_a_100_vegas", (2, 3), note="text of the second run"),
    Pair(
        "6_6_44/tcp_10_sockets.pcap",
        "6_6_44/ss_tcp_info_a_10",
        (4, 5),
        expect_matches=2,
        note="not the same dump: the text's 30 connections were re-made after the capture (cookies "
        "4129-4158, the pcap has 4099-4128); only the two sshd listeners are in both",
    ),
    Pair(
        "7_0_3/7_0_3_ss_tcp_info.pcap",
        "7_0_3/ss_tcp_info_n",
        (2, 3),
        by="address",
        note="`ss -tin` (no -e, so no cookie): matched by addresses and ports; the pcap's first run "
        "is an earlier dump made without INET_DIAG_CONG",
    ),
]


def vegas_rtt(msg: bytes) -> int | None:
    """VEGAS quirk: ss computes `send` from tcpvegas_info.tcpv_rtt when vegas is enabled (misc/ss.c
    tcp_show_info), not from tcpi_rtt; dyncc does not decode tcpvegas_info, so the oracle is told."""
    for attr in attributes(msg):
        if attr.type == INET_DIAG_VEGASINFO:
            enabled, _rttcnt, rtt, _minrtt = struct.unpack("<4I", attr_payload(msg, attr))
            if enabled and rtt and rtt != 0x7FFFFFFF:
                return int(rtt)
    return None


def _row_key(parsed: Parsed, row: int, by: str) -> object:
    c = parsed.columns
    if by == "cookie":
        return int(c["cookie"][row])
    src, dst = bytes(c["src_addr"][row]), bytes(c["dst_addr"][row])
    return (src, int(c["src_port"][row]), dst, int(c["dst_port"][row]))


def _sock_key(sock: Any, by: str) -> object:
    if by == "cookie":
        return sock.cookie
    local, peer = addr_key(sock.local), addr_key(sock.peer)
    assert local[0] is not None and peer[0] is not None, "wildcard addresses need cookies to match"
    return (*local, *peer)


def compare_pair(pair: Pair) -> tuple[int, int]:
    """Compare a pair; returns (sockets compared, rows in the selected dumps)."""
    dumps = pcap_dumps(XTCP2 / pair.pcap)
    socks = parse_ss((XTCP2 / pair.text).read_text())
    printed = {key for s in socks for key in s.info}
    by_key = {_sock_key(s, pair.by): s for s in socks}
    assert len(by_key) == len(socks), "duplicate socket keys in the ss text"
    compared = rows = 0
    problems: list[str] = []
    for index in pair.dumps:
        dump = dumps[index]
        rows += dump.parsed.rows
        for row in range(dump.parsed.rows):
            sock = by_key.pop(_row_key(dump.parsed, row, pair.by), None)
            if sock is None:
                continue
            compared += 1
            bad = compare(sock, dump.parsed, row, printed_keys=printed, vegas_rtt=vegas_rtt(dump.messages[row]))
            problems += [f"{sock.local} {sock.peer}: {b}" for b in bad]
    assert problems == []
    if pair.expect_matches is None:
        assert compared == rows == len(socks)
    else:
        assert compared == pair.expect_matches
    return compared, rows


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p.text)
def test_values_equal_the_ss_text(pair: Pair) -> None:
    compare_pair(pair)


def test_every_kernel_is_compared_with_ss() -> None:
    """Each kernel folder of the fixtures has at least one full ss comparison."""
    kernels = {p.name for p in XTCP2.iterdir() if p.is_dir() and re.fullmatch(r"\d+_\d+_\d+", p.name)}
    full = {p.pcap.split("/")[0] for p in PAIRS if p.expect_matches is None}
    assert kernels == full == {"4_19_319", "5_4_281", "5_15_164", "6_1_103", "6_6_44", "6_8_12", "6_10_3", "7_0_3"}


# ---------------------------------------------------------------- EXPECTED.json values


def test_first_messages_equal_expected() -> None:
    """first_inet_diag_msg / first_sockid of each reply capture (what xtcp2's tests assert).

    Expires, Timer, Retrans, Rqueue, Wqueue and ifindex are not decoded by dyncc (not columns).
    """
    checked = 0
    for name, exp in xtcp2_expected().items():
        if not name.endswith(".pcap"):
            continue
        dump = pcap_dumps(XTCP2 / name)[0]
        c = {k: v[0] for k, v in dump.parsed.columns.items()}
        if "first_inet_diag_msg" in exp:
            m = exp["first_inet_diag_msg"]
            got = (int(c["family"]), int(c["state"]), int(c["uid"]), int(c["inode"]))
            assert got == (m["Family"], m["State"], m["UID"], m["Inode"]), name
        sid = exp["first_sockid"]
        assert int(c["cookie"]) == sid["cookie"], name
        assert (int(c["src_port"]), int(c["dst_port"])) == (sid["sport"], sid["dport"]), name
        for col, text in (("src_addr", sid["src"]), ("dst_addr", sid["dst"])):
            assert bytes(c[col]) == addr_key(f"[{text}]:0" if ":" in text else f"{text}:0")[0], name
        assert int(c["family"]) == (2 if sid["ipver"] == 4 else 10)
        checked += 1
    assert checked


TCP_INFO_RENAMES = {
    "AdvMss": "advmss",
    "NotSentBytes": "notsent_bytes",
    "DeliveryRateAppLimited": "app_limited",
    "TotalRTO": "total_rto",
    "TotalRTORecoveries": "total_rto_recoveries",
    "TotalRTOTime": "total_rto_time",
}
#: Go fields of xtcp2's TCPInfo that dyncc deliberately does not decode.
TCP_INFO_NOT_DECODED = {
    "State": "tcpi_state repeats inet_diag_msg.idiag_state, which dyncc reads",
    "FastopenClientFail": "2-bit field after delivery_rate_app_limited, not a dyncc column",
}
SKMEM = {
    "RmemAlloc": "skmem_rmem_alloc", "RcvBuf": "skmem_rcvbuf", "WmemAlloc": "skmem_wmem_alloc",
    "SndBuf": "skmem_sndbuf", "FwdAlloc": "skmem_fwd_alloc", "WmemQueued": "skmem_wmem_queued",
    "Optmem": "skmem_optmem", "Backlog": "skmem_backlog", "Drops": "skmem_drops",
}  # fmt: skip
#: Attribute types dyncc decodes; any other is walked over.
DECODED_TYPES = {2: "INFO", 4: "CONG", 7: "SKMEMINFO", 16: "BBRINFO"}
#: EXPECTED keys of attributes dyncc does not decode (meminfo: dyncc reads skmeminfo instead).
NOT_DECODED_EXPECTED = {"meminfo", "cgroup_id", "class_id", "sockopt_u16", "tos", "tclass", "shutdown"}
NOT_DECODED_EXPECTED |= {"dctcp_info", "vegas_info"}


def go_to_column(name: str) -> str:
    return TCP_INFO_RENAMES.get(name) or re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def expected_columns(exp: dict[str, Any]) -> dict[str, Any]:
    """EXPECTED.json values of one attribute file as dyncc column values."""
    out: dict[str, Any] = {}
    for key, value in exp.items():
        if key == "tcp_info":
            out.update({go_to_column(k): v for k, v in value.items() if k not in TCP_INFO_NOT_DECODED})
        elif key == "bbr_info":
            out["has_bbr_info"] = 1
            out["bbr_bw"] = (value["BwHi"] << 32) | value["BwLo"]
            out["bbr_min_rtt"] = value["MinRtt"]
            out["bbr_pacing_gain"] = value["PacingGain"]
            out["bbr_cwnd_gain"] = value["CwndGain"]
        elif key == "skmeminfo":
            out.update({SKMEM[k]: v for k, v in value.items()})
        elif key == "cong":
            out["cc_index"] = value
        else:
            assert key in NOT_DECODED_EXPECTED or key == "asserted_by", key
    return out


def raw_attr(path: Path) -> bytes:
    data = path.read_bytes()
    rta_len = struct.unpack_from("<H", data)[0]
    return data[:rta_len]


@pytest.mark.parametrize("path", ATTRIBUTE_FILES, ids=rel)
def test_single_attribute_files(path: Path) -> None:
    """Each attribute file through the parser: EXPECTED values, unaffected by what precedes it."""
    rta_type, payload = rtattr(path.read_bytes())
    rows, solo, errors = decoded(diag_message([raw_attr(path)]))
    _, empty, _ = decoded(diag_message([]))
    assert rows == 1
    assert errors == ({} if rta_type == 2 else {"missing_tcp_info": 1})
    if rta_type == 2:
        assert solo["tcp_info_len"] == len(payload)
    if rta_type not in DECODED_TYPES:  # walked over: no column changes
        assert solo == empty
    exp = xtcp2_expected().get(rel(path))
    if exp is not None:
        want = expected_columns(exp)
        assert {k: solo[k] for k in want} == want
    # behind every attribute of its folder that dyncc skips (odd lengths and padding included)
    others = [
        raw_attr(p)
        for p in ATTRIBUTE_FILES
        if p.parent == path.parent and rtattr(p.read_bytes())[0] not in DECODED_TYPES
    ]
    rows, behind, errors_behind = decoded(diag_message([*others, raw_attr(path)]))
    assert (rows, behind, errors_behind) == (1, solo, errors)


def test_every_expected_attribute_value_is_checked() -> None:
    """EXPECTED.json's attribute entries are all attribute files of the index (none skipped silently)."""
    named = {k for k in xtcp2_expected() if not k.startswith("_") and not k.endswith(".pcap")}
    assert named <= {rel(p) for p in ATTRIBUTE_FILES}
    decodable = {k for k in named if set(xtcp2_expected()[k]) - {"asserted_by"} - NOT_DECODED_EXPECTED}
    assert len(decodable) == 16


# ---------------------------------------------------------------- m-lab/tcp-info


def unzstd(path: Path) -> bytes:
    """zstd via pyarrow (installed with chdb): the repository needs no extra dependency for it."""
    import pyarrow as pa

    with pa.CompressedInputStream(pa.OSFile(str(path)), "zstd") as f:
        data: bytes = f.read()
    return data


@cache
def mlab_expected() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MLAB / "EXPECTED.json").read_text())
    return data


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in unzstd(path).decode().splitlines()]


def rebuild(record: dict[str, Any]) -> bytes:
    """The wire message of an ArchivalRecord (m-lab's recipe, EXPECTED.json _about)."""
    attrs: list[bytes] = []
    for rta_type, value in enumerate(record["Attributes"] or []):
        if value:
            payload = base64.b64decode(value)
            attrs.append(struct.pack("<HH", 4 + len(payload), rta_type) + payload)
    return diag_message(attrs, header=base64.b64decode(record["RawIDM"]))


def parse_stream(data: bytes) -> tuple[Parsed, dict[str, int], int]:
    """Messages stored back to back (no datagram boundaries, no NLMSG_DONE)."""
    walk = walk_messages(data, 0, len(data))
    assert walk.error == 0
    errors = ErrorCounts()
    parsed = parse_messages(data, walk.offsets, walk.lengths, errors)
    return parsed, {k: v for k, v in errors.items() if v}, len(walk.offsets)


def parse_records(records: list[dict[str, Any]]) -> tuple[Parsed, dict[str, int]]:
    parsed, errors, count = parse_stream(b"".join(rebuild(r) for r in records))
    assert parsed.rows == count == len(records)
    return parsed, errors


@cache
def mlab_raw() -> tuple[Parsed, dict[str, int], int]:
    """testdata.zst: six dumps' messages back to back (each dump with its own seq and pid)."""
    return parse_stream(unzstd(MLAB / "netlink/testdata/testdata.zst"))


def test_mlab_raw_messages() -> None:
    exp = mlab_expected()["netlink/testdata/testdata.zst"]
    parsed, errors, count = mlab_raw()
    c = parsed.columns
    assert (count, parsed.rows, errors) == (exp["messages"], exp["messages"], {})
    names = {2: "AF_INET", 10: "AF_INET6"}
    assert dict(Counter(names[f] for f in c["family"].tolist())) == exp["family"]
    assert int(np.count_nonzero(c["state"] == 1)) == exp["state_ESTABLISHED"]
    assert set(c["tcp_info_len"].tolist()) == {exp["tcp_info_payload_len"]}
    assert {parsed.cc_names[i] for i in c["cc_index"].tolist()} == {exp["cong"]}


def test_mlab_archive_equals_the_raw_messages() -> None:
    """Same sockets, attributes re-ordered by type: dyncc decodes them to identical columns."""
    records = jsonl(MLAB / "netlink/testdata/archiveRecords.jsonl.zst")
    raw = unzstd(MLAB / "netlink/testdata/testdata.zst")
    assert len(records) == mlab_expected()["netlink/testdata/archiveRecords.jsonl.zst"]["records"]
    walk = walk_messages(raw, 0, len(raw))
    for record, off in zip(records, walk.offsets, strict=True):
        assert base64.b64decode(record["RawIDM"]) == raw[off + 16 : off + 88]
    parsed, errors = parse_records(records)
    ref, _, _ = mlab_raw()
    assert errors == {}
    assert parsed.cc_names == ref.cc_names
    for name, col in ref.columns.items():
        assert np.array_equal(parsed.columns[name], col), name


def test_mlab_connection_counters() -> None:
    """m-lab's GetStats on one NDT connection: bytes sent / received never decrease, end values."""
    key = "netlink/testdata/ndt-7hhhv_1559749627_0000000000062D84.00000.jsonl.zst"
    exp = mlab_expected()[key]
    lines = jsonl(MLAB / key)
    records = [r for r in lines if "RawIDM" in r]
    assert (len(lines), len(lines) - len(records)) == (exp["lines"], exp["metadata_line"])
    parsed, errors = parse_records(records)
    c = parsed.columns
    assert errors == {}
    assert set(c["tcp_info_len"].tolist()) == {exp["tcp_info_payload_len"]}
    assert np.all(np.diff(c["bytes_sent"].astype(np.int64)) >= 0)
    assert np.all(np.diff(c["bytes_received"].astype(np.int64)) >= 0)
    assert (int(c["bytes_sent"][-1]), int(c["bytes_received"][-1])) == (
        exp["last_bytes_sent"],
        exp["last_bytes_received"],
    )
    # IPv4-mapped IPv6 sockets: the address columns keep the ::ffff:a.b.c.d form
    assert set(c["family"].tolist()) == {10}
    assert np.all(c["src_addr"][:, 10:12] == 0xFF)


@pytest.mark.parametrize(
    "key",
    [
        "snapshot/testdata/ndt-jdczh_1553815964_00000000000003E8.00185.jsonl.zst",
        "cmd/csvtool/testdata/ndt-jdczh_1553815964_00000000000003E8.00183.jsonl.zst",
        "saver/testdata/finwait2-sample_1554836592_unsafe_000000000135A272.00000.jsonl.zst",
    ],
)
def test_mlab_archive_files(key: str) -> None:
    exp = mlab_expected()[key]
    lines = jsonl(MLAB / key)
    records = [r for r in lines if "RawIDM" in r]
    metadata = [r for r in lines if "Metadata" in r and "RawIDM" not in r]
    assert len(lines) == len(records) + len(metadata) == exp["lines"]
    assert len(metadata) == exp.get("metadata_line", 1)
    parsed, errors = parse_records(records)
    assert errors == timewait_errors(parsed)  # the FIN-WAIT-2 record is a timewait minisocket
    if "tcp_info_payload_len" in exp:
        assert set(parsed.columns["tcp_info_len"].tolist()) - {0} == {exp["tcp_info_payload_len"]}
    if "states" in exp:
        names = {1: "ESTABLISHED", 4: "FIN_WAIT1", 5: "FIN_WAIT2"}
        assert dict(Counter(names[s] for s in parsed.columns["state"].tolist())) == exp["states"]
    if "family" in exp:
        assert {int(f) for f in parsed.columns["family"].tolist()} == {2 if exp["family"] == "AF_INET" else 10}


# ---------------------------------------------------------------- malformed variants of real messages


@cache
def sample_messages() -> list[bytes]:
    """A few real messages of every kernel (the first dump of each ss pair) and m-lab's."""
    out: list[bytes] = []
    for pair in PAIRS:
        dump = pcap_dumps(XTCP2 / pair.pcap)[pair.dumps[0]]
        out += dump.messages[:3] + dump.messages[-2:]
    raw = unzstd(MLAB / "netlink/testdata/testdata.zst")
    out += messages(raw)[:3]
    return [m for m in out if attributes(m)]  # TIME-WAIT messages have no attributes


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(min_value=0), cut=st.integers(min_value=16))
def test_truncated_real_messages_are_counted(index: int, cut: int) -> None:
    msgs = sample_messages()
    msg = msgs[index % len(msgs)]
    check_truncated(msg, 16 + cut % (len(msg) - 16))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    index=st.integers(min_value=0),
    which=st.integers(min_value=0),
    nla_len=st.one_of(st.integers(0, 8), st.integers(0, 400), st.integers(0, 0xFFFF)),
)
def test_garbled_attribute_lengths_are_counted(index: int, which: int, nla_len: int) -> None:
    msgs = sample_messages()
    msg = msgs[index % len(msgs)]
    attrs: list[Attr] = attributes(msg)
    check_nla_len(msg, which % len(attrs), nla_len)
