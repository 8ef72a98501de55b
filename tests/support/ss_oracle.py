"""Test-only `ss -tie` text reader and an oracle that prints parsed rows the way ss does.

Contract:
  * `parse_ss(text)` reads the output of `ss -t -i -e -n` (with or without the
    header line, one line per socket with -O or the info on an indented
    continuation line) into `SsSocket`s: state, addresses, the -e details
    (uid, ino, sk cookie) and the -i tokens (`key:value`, `key value` for
    send / pacing_rate / delivery_rate, bare flags such as `ts` or the
    congestion-control name).
  * `expected_info(parsed, row)` renders one row of a diag_parse.Parsed with
    iproute2's ss formatting rules (misc/ss.c: tcp_show_info and
    tcp_stats_print; numbers as `ss -n` prints them, with sprint_bw's "%.0f")
    for every field dyncc decodes.  Only fields ss prints are rendered, with
    ss's own conditions (rto only when non-zero, ssthresh below 0xFFFF, ...).
  * `compare(sock, parsed, row)` lists every disagreement between them:
    addresses, ports, state, uid, inode, cookie, and each rendered token.

The comparison is exact (string equality of ss's own formatting), so one
wrong byte offset or unit shows up as a mismatch.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import numpy as np

from collector.netlink.sockdiag import STATE_NAMES
from collector.netlink.sockdiag_parse import Parsed

#: ss's state column names (misc/ss.c sstate_name) by kernel TCP state.
SS_STATE = {
    1: "ESTAB", 2: "SYN-SENT", 3: "SYN-RECV", 4: "FIN-WAIT-1", 5: "FIN-WAIT-2", 6: "TIME-WAIT",
    7: "UNCONN", 8: "CLOSE-WAIT", 9: "LAST-ACK", 10: "LISTEN", 11: "CLOSING", 12: "SYN-RECV",
}  # fmt: skip
assert set(SS_STATE) == set(STATE_NAMES)

#: ss prints these as "key value" (two tokens).
_SPACED = ("send", "pacing_rate", "delivery_rate")
#: Bare option words ss prints from tcpi_options.
OPTION_FLAGS = {"ts": 1, "sack": 2, "ecn": 8, "ecnseen": 16, "fastopen": 32}
TCPI_OPT_WSCALE = 4
#: Bare words ss prints that are not a congestion-control name.
_NOT_CC = {*OPTION_FLAGS, "app_limited", "bidir", "<->", "<--", "-->", "---"}


@dataclass
class SsSocket:
    state: str
    local: str  # as printed, e.g. "127.0.0.1:4000", "[::1]:22", "*:4009"
    peer: str
    details: dict[str, str] = field(default_factory=dict)  # uid / ino / sk / ...
    info: dict[str, str] = field(default_factory=dict)  # -i tokens, key -> value ('' for flags)
    cc: str = ""

    @property
    def cookie(self) -> int | None:
        sk = self.details.get("sk")
        return int(sk, 16) if sk is not None else None


def _split_addr(text: str) -> tuple[str, str]:
    host, _, port = text.rpartition(":")
    return host, port


def addr_key(text: str) -> tuple[bytes | None, int]:
    """(16-byte address or None for '*', port) of an ss address column (IPv4 as ::ffff:a.b.c.d)."""
    host, port = _split_addr(text)
    host = host.split("%", 1)[0]  # interface scope (addr%lo)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    num = 0 if port == "*" else int(port)
    if host == "*":
        return None, num
    ip = ipaddress.ip_address(host)
    if isinstance(ip, ipaddress.IPv4Address):
        return ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ip.packed).packed, num
    return ip.packed, num


def parse_ss(text: str) -> list[SsSocket]:
    """Every socket of `ss -tien` output (multi-line or -O, header optional)."""
    records: list[list[str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line[0] in " \t":
            if not records:
                raise ValueError(f"continuation line before any socket: {line[:60]!r}")
            records[-1].extend(line.split())
            continue
        words = line.split()
        if words[0] == "State" and "Recv-Q" in words:
            continue  # header
        records.append(words)
    return [_socket(words) for words in records]


def _socket(words: list[str]) -> SsSocket:
    if len(words) < 5:
        raise ValueError(f"short ss line: {' '.join(words)!r}")
    sock = SsSocket(state=words[0], local=words[3], peer=words[4])
    rest = words[5:]
    # -e details come before the -i tokens; the -i part starts at skmem:( or the first option word
    i = 0
    while i < len(rest):
        word = rest[i]
        if word in _SPACED and i + 1 < len(rest):
            sock.info[word] = rest[i + 1]
            i += 2
            continue
        key, colon, value = word.partition(":")
        if colon and key in ("uid", "ino", "sk") and key not in sock.details:
            sock.details[key] = value
        elif colon:
            sock.info.setdefault(key, value)
        elif word in _NOT_CC:
            sock.info[word] = ""
        elif word.isidentifier() and not sock.cc:
            sock.cc = word  # the congestion-control name: the only other bare word ss prints
        i += 1
    return sock


def _g(x: float) -> str:
    return f"{x:g}"  # the same digits as C's printf("%g")


def _bw(bits_per_second: float) -> str:
    return f"{bits_per_second:.0f}"  # ss -n: sprint_bw's "%.0f"


def expected_info(parsed: Parsed, row: int, *, vegas_rtt: int | None = None) -> dict[str, str]:
    """The -i tokens ss prints for this row, from the fields dyncc decoded (misc/ss.c rules).

    `vegas_rtt`: tcpv_rtt of the row's INET_DIAG_VEGASINFO when vegas is enabled
    (dyncc does not decode it): ss then computes `send` from it instead of tcpi_rtt.
    """
    c = {name: col[row] for name, col in parsed.columns.items() if col.ndim == 1}
    out: dict[str, str] = {}
    sk = [int(c[f"skmem_{n}"]) for n in ("rmem_alloc", "rcvbuf", "wmem_alloc", "sndbuf", "fwd_alloc")]
    sk += [int(c[f"skmem_{n}"]) for n in ("wmem_queued", "optmem", "backlog", "drops")]
    if any(sk):  # the kernel always sends a non-zero rcvbuf/sndbuf when it sends skmeminfo
        out["skmem"] = "(r{},rb{},t{},tb{},f{},w{},o{},bl{},d{})".format(*sk)
    if not int(c["tcp_info_len"]):
        return out
    opts = int(c["options"])
    for word, bit in OPTION_FLAGS.items():
        if opts & bit:
            out[word] = ""
    if opts & TCPI_OPT_WSCALE:
        out["wscale"] = f"{int(c['snd_wscale'])},{int(c['rcv_wscale'])}"
    u = {name: int(v) for name, v in c.items()}
    if u["rto"]:
        out["rto"] = _g(u["rto"] / 1000)
    if u["backoff"]:
        out["backoff"] = str(u["backoff"])
    if u["rtt"]:
        out["rtt"] = f"{_g(u['rtt'] / 1000)}/{_g(u['rttvar'] / 1000)}"
    if u["ato"]:
        out["ato"] = _g(u["ato"] / 1000)
    for key, name in (("mss", "snd_mss"), ("pmtu", "pmtu"), ("rcvmss", "rcv_mss"), ("advmss", "advmss")):
        if u[name]:
            out[key] = str(_int(u[name]) if key != "pmtu" else u[name])
    if u["snd_cwnd"]:
        out["cwnd"] = str(u["snd_cwnd"])
    if u["snd_ssthresh"] < 0xFFFF and u["snd_ssthresh"]:
        out["ssthresh"] = str(u["snd_ssthresh"])
    for key in ("bytes_sent", "bytes_retrans", "bytes_acked", "bytes_received"):
        if u[key]:
            out[key] = str(u[key])
    for key in ("segs_out", "segs_in", "data_segs_out", "data_segs_in"):
        if u[key]:
            out[key] = str(u[key])
    if u["has_bbr_info"]:
        text = f"(bw:{_bw(u['bbr_bw'] * 8.0)}bps,mrtt:{_g(u['bbr_min_rtt'] / 1000.0)}"
        if u["bbr_pacing_gain"]:
            text += f",pacing_gain:{_g(u['bbr_pacing_gain'] / 256.0)}"
        if u["bbr_cwnd_gain"]:
            text += f",cwnd_gain:{_g(u['bbr_cwnd_gain'] / 256.0)}"
        out["bbr"] = text + ")"
    send_rtt = u["rtt"] if vegas_rtt is None else vegas_rtt
    if send_rtt and u["snd_mss"] and u["snd_cwnd"]:
        out["send"] = _bw(float(u["snd_cwnd"]) * float(u["snd_mss"]) * 8000000.0 / float(send_rtt)) + "bps"
    for key, name in (("lastsnd", "last_data_sent"), ("lastrcv", "last_data_recv"), ("lastack", "last_ack_recv")):
        if u[name]:
            out[key] = str(u[name])
    if u["pacing_rate"] and u["pacing_rate"] != (1 << 64) - 1:
        text = _bw(u["pacing_rate"] * 8.0) + "bps"
        if u["max_pacing_rate"] and u["max_pacing_rate"] != (1 << 64) - 1:
            text += "/" + _bw(u["max_pacing_rate"] * 8.0) + "bps"
        out["pacing_rate"] = text
    if u["delivery_rate"]:
        out["delivery_rate"] = _bw(u["delivery_rate"] * 8.0) + "bps"
    if u["delivered"]:
        out["delivered"] = str(u["delivered"])
    if u["delivered_ce"]:
        out["delivered_ce"] = str(u["delivered_ce"])
    if u["app_limited"]:
        out["app_limited"] = ""
    if u["busy_time"]:
        out["busy"] = f"{u['busy_time'] // 1000}ms"
        for key in ("rwnd_limited", "sndbuf_limited"):
            if u[key]:
                out[key] = f"{u[key] // 1000}ms({100.0 * u[key] / u['busy_time']:.1f}%)"
    if u["unacked"]:
        out["unacked"] = str(u["unacked"])
    if u["retrans"] or u["total_retrans"]:
        out["retrans"] = f"{u['retrans']}/{u['total_retrans']}"
    if u["lost"]:
        out["lost"] = str(u["lost"])
    if u["sacked"] and u["state"] != 10:
        out["sacked"] = str(u["sacked"])
    if u["dsack_dups"]:
        out["dsack_dups"] = str(u["dsack_dups"])
    if u["fackets"]:
        out["fackets"] = str(u["fackets"])
    if _int(u["reordering"]) != 3:
        out["reordering"] = str(_int(u["reordering"]))
    if u["reord_seen"]:
        out["reord_seen"] = str(_int(u["reord_seen"]))
    if u["rcv_rtt"]:
        out["rcv_rtt"] = _g(u["rcv_rtt"] / 1000)
    if u["rcv_space"]:
        out["rcv_space"] = str(_int(u["rcv_space"]))
    if u["rcv_ssthresh"]:
        out["rcv_ssthresh"] = str(u["rcv_ssthresh"])
    if u["notsent_bytes"]:
        out["notsent"] = str(u["notsent_bytes"])
    if u["min_rtt"]:
        out["minrtt"] = _g(u["min_rtt"] / 1000)
    if u["rcv_ooopack"]:
        out["rcv_ooopack"] = str(u["rcv_ooopack"])
    if u["snd_wnd"]:
        out["snd_wnd"] = str(u["snd_wnd"])
    if u["rcv_wnd"]:
        out["rcv_wnd"] = str(u["rcv_wnd"])
    if u["rehash"]:
        out["rehash"] = str(u["rehash"])
    return out


def _int(v: int) -> int:
    """A u32 printed with %d (ss keeps some fields in int)."""
    return v - (1 << 32) if v & 0x80000000 else v


def _addr_of(parsed: Parsed, name: str, row: int) -> bytes:
    return bytes(np.asarray(parsed.columns[name][row], dtype=np.uint8))


def _same_addr(text: str, packed: bytes, port: int, family: int) -> bool:
    addr, num = addr_key(text)
    if addr is None:  # '*': the unspecified address of either family
        addr = bytes(16) if family == 10 else b"\0" * 10 + b"\xff\xff" + bytes(4)
    return addr == packed and num == port


def compare(
    sock: SsSocket,
    parsed: Parsed,
    row: int,
    *,
    printed_keys: set[str] | None = None,
    vegas_rtt: int | None = None,
) -> list[str]:
    """Disagreements between an ss socket and one parsed row ([] when they agree).

    `printed_keys`: every -i key this ss binary printed anywhere in the file;
    a field dyncc renders but this ss never prints (older iproute2) is not a mismatch.
    `vegas_rtt`: see expected_info.
    """
    c = parsed.columns
    bad: list[str] = []
    family = int(c["family"][row])
    state = int(c["state"][row])
    if SS_STATE.get(state) != sock.state:
        bad.append(f"state {SS_STATE.get(state)} != {sock.state}")
    if not _same_addr(sock.local, _addr_of(parsed, "src_addr", row), int(c["src_port"][row]), family):
        bad.append(f"local {sock.local}")
    if not _same_addr(sock.peer, _addr_of(parsed, "dst_addr", row), int(c["dst_port"][row]), family):
        bad.append(f"peer {sock.peer}")
    if sock.cookie is not None and sock.cookie != int(c["cookie"][row]):
        bad.append(f"sk {sock.cookie:x} != {int(c['cookie'][row]):x}")
    if "ino" in sock.details and int(sock.details["ino"]) != int(c["inode"][row]):
        bad.append(f"ino {sock.details['ino']} != {int(c['inode'][row])}")
    uid = int(c["uid"][row])
    if "ino" in sock.details and str(uid) != sock.details.get("uid", "0"):
        bad.append(f"uid {uid} != {sock.details.get('uid', '0')}")
    names = parsed.cc_names
    cc = names[int(c["cc_index"][row])]
    if cc != sock.cc:
        bad.append(f"cc {cc!r} != {sock.cc!r}")
    want = expected_info(parsed, row, vegas_rtt=vegas_rtt)
    for key in sorted(set(want) | set(sock.info)):
        if key not in KNOWN_INFO_KEYS:
            continue  # a field dyncc does not decode (tos, dctcp, timer, ...)
        got = sock.info.get(key)
        exp = want.get(key)
        if got == exp:
            continue
        if got is None and printed_keys is not None and key not in printed_keys:
            continue  # this ss version never prints the field
        bad.append(f"{key}: ss {got!r} != dyncc {exp!r}")
    return bad


#: -i keys expected_info renders (everything else ss prints is not compared).
KNOWN_INFO_KEYS = frozenset(
    {
        "skmem", *OPTION_FLAGS, "wscale", "rto", "backoff", "rtt", "ato", "mss", "pmtu", "rcvmss",
        "advmss", "cwnd", "ssthresh", "bytes_sent", "bytes_retrans", "bytes_acked", "bytes_received",
        "segs_out", "segs_in", "data_segs_out", "data_segs_in", "bbr", "send", "lastsnd", "lastrcv",
        "lastack", "pacing_rate", "delivery_rate", "delivered", "delivered_ce", "app_limited", "busy",
        "rwnd_limited", "sndbuf_limited", "unacked", "retrans", "lost", "sacked", "dsack_dups",
        "fackets", "reordering", "reord_seen", "rcv_rtt", "rcv_space", "rcv_ssthresh", "notsent",
        "minrtt", "rcv_ooopack", "snd_wnd", "rcv_wnd", "rehash",
    }
)  # fmt: skip
