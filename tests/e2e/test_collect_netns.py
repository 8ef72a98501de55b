"""The collector against the kernel: real IPv4/IPv6 connections in namespaces, compared with `ss -tin`.

Two namespaces joined by a veth carry several hundred connections; routes with
`congctl` force cubic on 198.51.100.0/24 and 2001:db8:2::/64 and bbr on
203.0.113.0/24 and 2001:db8:1::/64.  Port 8443 is a dual-stack listener so
IPv4 clients show up as IPv4-mapped IPv6 sockets.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from collector.telemetry.filters import FilterSpec, parse_networks
from collector.telemetry.poller import Poller, PollerConfig
from schemas.addresses import format_addresses, format_prefixes
from schemas.framing import split_frames
from schemas.tcpinfo_decode import decode_batch
from tests.support.netns_util import namespaces, new_ns_name, ns_sh, require_root, start_ready, veth_pair

pytestmark = pytest.mark.netns
REPO = Path(__file__).resolve().parents[2]
CONNS = {  # (address, port): connections
    ("198.51.100.1", 443): 120,  # cubic
    ("203.0.113.1", 443): 100,  # bbr
    ("2001:db8:1::1", 443): 100,  # bbr
    ("2001:db8:2::1", 443): 60,  # cubic
    ("198.51.100.1", 8443): 40,  # dual-stack listener: v4-mapped server sockets, cubic
}
WANT_CC = {"198.51.100": "cubic", "203.0.113": "bbr", "2001:db8:1:": "bbr", "2001:db8:2:": "cubic"}


@dataclass
class Lab:
    server: str
    client: str


def _start(ns: str, *args: str) -> subprocess.Popen[str]:
    return start_ready(ns, "tests.support.collector_conns", *args)


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    require_root()
    s_name, c_name = new_ns_name("dcol-s"), new_ns_name("dcol-c")
    with namespaces([s_name, c_name]):
        veth_pair(s_name, "eth0", c_name, "eth0")
        for ns, host in ((s_name, 1), (c_name, 2)):
            for net in ("198.51.100", "203.0.113"):
                ns_sh(ns, "ip", "addr", "add", f"{net}.{host}/24", "dev", "eth0", "noprefixroute")
            for net in ("2001:db8:1", "2001:db8:2"):
                ns_sh(
                    ns,
                    "ip",
                    "-6",
                    "addr",
                    "add",
                    f"{net}::{host}/64",
                    "dev",
                    "eth0",
                    "nodad",
                    "noprefixroute",
                )
            # our own prefix routes (noprefixroute above), with src so that a connection to
            # 203.0.113.1 comes from 203.0.113.2 and both ends use the same route
            for family, prefix, src, cc in (
                ("-4", "198.51.100.0/24", f"198.51.100.{host}", "cubic"),
                ("-4", "203.0.113.0/24", f"203.0.113.{host}", "bbr"),
                ("-6", "2001:db8:1::/64", f"2001:db8:1::{host}", "bbr"),
                ("-6", "2001:db8:2::/64", f"2001:db8:2::{host}", "cubic"),
            ):
                ns_sh(ns, "ip", family, "route", "replace", prefix, "dev", "eth0", "src", src, "congctl", cc)
        procs = [_start(s_name, "serve", "443", "8443")]
        try:
            procs.append(_start(c_name, "connect", *(f"{a},{p},{n}" for (a, p), n in CONNS.items())))
            time.sleep(0.3)  # last ACKs settle
            yield Lab(server=s_name, client=c_name)
        finally:
            for p in procs:
                if p.stdin:
                    p.stdin.close()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()


_SS_HEAD = re.compile(r"^(\S+)\s+\d+\s+\d+\s+(\S+):(\d+)\s+(\S+):(\d+)")


def ss_sockets(ns: str) -> dict[tuple[str, int, str, int], dict[str, Any]]:
    """`ss -Htin` in the namespace, keyed by (local, lport, peer, pport)."""
    out = ns_sh(ns, "ss", "-Htin")
    socks: dict[tuple[str, int, str, int], dict[str, Any]] = {}
    key = None
    for line in out.splitlines():
        m = _SS_HEAD.match(line)
        if m:
            state, la, lp, pa, pp = m.groups()
            key = (la.strip("[]"), int(lp), pa.strip("[]"), int(pp))
            socks[key] = {"state": state}
            rest = line[m.end() :].split()
        else:
            rest = line.split()
        if key is None or not rest:
            continue
        info = socks[key]
        for tok in rest:
            if tok in ("bbr", "cubic", "reno", "dctcp", "bbr2", "bbr3"):
                info["cc"] = tok
            elif tok.startswith("rtt:"):
                info["rtt_us"] = round(float(tok[4:].split("/")[0]) * 1000)
            elif tok.startswith("cwnd:"):
                info["cwnd"] = int(tok[5:])
            elif tok.startswith("bytes_acked:"):
                info["bytes_acked"] = int(tok[12:])
            elif tok.startswith("bytes_received:"):
                info["bytes_received"] = int(tok[15:])
    return socks


def _norm(addr: str) -> str:
    ip = ipaddress.ip_address(addr)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        return f"::ffff:{ip.ipv4_mapped}"  # ss prints mapped sockets as [::ffff:a.b.c.d]
    return str(ip)


def collect(cfg: PollerConfig) -> list:
    return [decode_batch(b) for b in Poller(cfg).poll().batches]


def exported_rows(batches: list) -> list[dict[str, Any]]:
    rows = []
    for b in batches:
        c = b.columns
        fam = c["family"].tolist()
        src = format_addresses(c["src_addr"])
        dst = format_addresses(c["dst_addr"])
        pref = format_prefixes(c["client_prefix"], c["client_prefix_len"])
        cc = b.cc()
        for i in range(b.row_count):
            mapped = fam[i] == 10 and "." in src[i]
            rows.append(
                {
                    "netns": b.netns,
                    "family": fam[i],
                    "state": int(c["state"][i]),
                    "src": ("::ffff:" + src[i]) if mapped else src[i],
                    "dst": ("::ffff:" + dst[i]) if mapped else dst[i],
                    "sport": int(c["src_port"][i]),
                    "dport": int(c["dst_port"][i]),
                    "cc": cc[i],
                    "rtt": int(c["rtt"][i]),
                    "cwnd": int(c["snd_cwnd"][i]),
                    "bytes_acked": int(c["bytes_acked"][i]),
                    "bytes_received": int(c["bytes_received"][i]),
                    "prefix": pref[i],
                    "has_bbr_info": int(c["has_bbr_info"][i]),
                    "bbr_bw": int(c["bbr_bw"][i]),
                    "tcp_info_len": int(c["tcp_info_len"][i]),
                }
            )
    return rows


def test_every_socket_matches_ss(lab: Lab) -> None:
    cfg = PollerConfig(host="t", netns=(lab.server, lab.client), max_rows=97)
    batches = collect(cfg)
    rows = exported_rows(batches)
    total = sum(CONNS.values())
    by_ns = Counter(r["netns"] for r in rows)
    assert by_ns == {lab.server: total, lab.client: total}
    # batches: capped rows, contiguous sequences, headers name their namespace
    assert [b.sequence for b in batches] == list(range(len(batches)))
    assert max(b.row_count for b in batches) <= 97
    for ns in (lab.server, lab.client):
        mine = [b for b in batches if b.netns == ns]
        assert [b.batch_index for b in mine] == list(range(len(mine)))
        # batches are sent as they are made: only the last one knows the count and the totals
        assert len(mine) > 2
        assert [b.batch_count for b in mine] == [0] * (len(mine) - 1) + [len(mine)]
        assert (mine[-1].sockets_seen, mine[-1].sockets_exported) == (total, total)
        assert mine[-1].poll_end_ns >= mine[-1].poll_start_ns > 0
        assert all(b.sockets_seen == 0 and b.poll_end_ns == 0 for b in mine[:-1])
        ss = ss_sockets(ns)
        assert len(ss) == total
        got = {(r["src"], r["sport"], r["dst"], r["dport"]): r for r in rows if r["netns"] == ns}
        assert set(got) == {(_norm(a), lp, _norm(b), pp) for a, lp, b, pp in ss}
        for (la, lp, pa, pp), info in ss.items():
            r = got[(_norm(la), lp, _norm(pa), pp)]
            assert info["state"] == "ESTAB" and r["state"] == 1
            assert r["cc"] == info["cc"]
            # the route to the peer decides; both ends sit in the same documentation subnet
            net = next(k for k in WANT_CC if pa.replace("::ffff:", "").startswith(k))
            assert r["cc"] == WANT_CC[net], (pa, r["cc"])  # the route's congctl took effect
            assert r["bytes_acked"] == info.get("bytes_acked", 0)
            assert r["bytes_received"] == info.get("bytes_received", 0)
            assert r["cwnd"] == info["cwnd"]
            assert abs(r["rtt"] - info["rtt_us"]) <= 1  # ss prints ms with 3 decimals
            assert r["tcp_info_len"] >= 232
            assert r["has_bbr_info"] == (1 if r["cc"] == "bbr" else 0)
            if r["cc"] == "bbr":
                assert r["bbr_bw"] > 0
            want_prefix = {
                "198.51.100": "198.51.100.0/24",
                "203.0.113": "203.0.113.0/24",
                "2001:db8:1:": "2001:db8:1::/56",
                "2001:db8:2:": "2001:db8:2::/56",
            }[net]
            assert r["prefix"] == want_prefix
        fams = Counter(r["family"] for r in got.values())
        assert fams == {
            2: CONNS[("198.51.100.1", 443)]
            + CONNS[("203.0.113.1", 443)]
            + (0 if ns == lab.server else CONNS[("198.51.100.1", 8443)]),
            10: 160 + (CONNS[("198.51.100.1", 8443)] if ns == lab.server else 0),
        }


def test_filters_are_applied_and_counted(lab: Lab) -> None:
    total = sum(CONNS.values())
    cases = {
        "local_port": FilterSpec(local_ports=frozenset({8443})),
        "excluded_address": FilterSpec(exclude=tuple(parse_networks(["203.0.113.0/24", "2001:db8:2::/48"]))),
        "sampled_out": FilterSpec(sample_n=4),
        "min_bytes_acked": FilterSpec(min_bytes_acked=30_000),
    }
    kept_by_sample = None
    for reason, spec in cases.items():
        cfg = PollerConfig(host="t", netns=(lab.server,), filters=spec)
        result = Poller(cfg).poll()
        rows = exported_rows([decode_batch(b) for b in result.batches])
        stats = result.namespaces[0]
        assert stats.seen == total
        assert stats.exported == len(rows)
        assert stats.filtered[reason] == total - len(rows)
        assert sum(stats.filtered.values()) == total - len(rows)
        if reason == "local_port":
            assert len(rows) == CONNS[("198.51.100.1", 8443)]
            assert {r["sport"] for r in rows} == {8443}
        elif reason == "excluded_address":
            assert len(rows) == total - CONNS[("203.0.113.1", 443)] - CONNS[("2001:db8:2::1", 443)]
        elif reason == "sampled_out":
            assert 0 < len(rows) < total / 2
            kept_by_sample = {r["sport"] * 0 + r["dport"] for r in rows}
        else:  # each server socket sent 60 kB (all acked): all kept
            assert len(rows) == total
    # ... while each client socket sent only 20 kB: all dropped
    cfg = PollerConfig(host="t", netns=(lab.client,), filters=cases["min_bytes_acked"])
    result = Poller(cfg).poll()
    assert result.exported == 0 and result.filtered == {"min_bytes_acked": total}
    # sampling is stable: the same sockets are kept by a second poll
    cfg = PollerConfig(host="t", netns=(lab.server,), filters=cases["sampled_out"])
    again = exported_rows(collect(cfg))
    assert {r["dport"] for r in again} == kept_by_sample


def test_cli_file_sink_once(lab: Lab, tmp_path: Path) -> None:
    out = tmp_path / "b.bin"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dyncc.cli",
            "collect",
            "--once",
            "--netns",
            lab.server,
            "--sink",
            "file",
            "--out",
            str(out),
            "--host",
            "edge-t",
            "--pop",
            "tst",
            "--max-rows",
            "150",
            "--port",
            "443",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"poll 1: netns=1 seen=420 exported=380 filtered=40", proc.stderr), proc.stderr
    batches = [decode_batch(r) for r in split_frames(out.read_bytes())]
    # one dump per family, each split evenly under the 150-row cap: 220 IPv4 + 160 IPv6 sockets
    assert [b.row_count for b in batches] == [110, 110, 80, 80]
    assert [b.sequence for b in batches] == [0, 1, 2, 3]
    assert {(b.host, b.pop, b.netns) for b in batches} == {("edge-t", "tst", lab.server)}
    ports = np.concatenate([b.columns["src_port"] for b in batches])
    assert set(ports.tolist()) == {443}


def _cookies(batches: list[bytes]) -> list[int]:
    return sorted(int(c) for b in batches for c in decode_batch(b).columns["cookie"])


def test_prefetched_poll_matches_an_in_process_poll(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--once` starts the dump in a helper process before numpy loads; the poll must not differ."""
    import os
    import threading

    from collector.netlink.sockdiag import state_mask
    from collector.telemetry.prefetch import Prefetch

    monkeypatch.setattr(threading, "active_count", lambda: 1)  # pytest may run threads; the helper needs none
    cfg = PollerConfig(host="t", netns=(lab.server, lab.client), filters=FilterSpec(), max_rows=100)
    prefetch = Prefetch.start([lab.server, lab.client], state_mask(tuple(cfg.states)), chunk_bytes=64 << 10, slots=2)
    assert prefetch is not None and len(prefetch.jobs) == 4  # two namespaces, two families
    fetched = Poller(cfg, prefetch=prefetch).poll()
    assert prefetch.next_job == 4 and prefetch.closed  # every dump came from the helper, which is gone
    with pytest.raises(ChildProcessError):
        os.waitpid(prefetch.child, 0)  # already reaped
    direct = Poller(cfg).poll()
    assert fetched.seen == direct.seen == 2 * sum(CONNS.values())
    assert fetched.failed_netns == {} and not fetched.errors
    assert _cookies(fetched.batches) == _cookies(direct.batches)
    assert [len(b) > 0 for b in fetched.batches] == [True] * len(fetched.batches)
    assert fetched.start_ns == prefetch.started_ns  # the poll is stamped with when its dump began


def test_prefetch_honours_the_poll_deadline(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import threading

    from collector.netlink.sockdiag import DumpTimeout, state_mask
    from collector.telemetry.prefetch import Prefetch

    monkeypatch.setattr(threading, "active_count", lambda: 1)
    cfg = PollerConfig(host="t", netns=(lab.server,), filters=FilterSpec())
    prefetch = Prefetch.start([lab.server], state_mask(tuple(cfg.states)))
    assert prefetch is not None
    with pytest.raises(DumpTimeout):
        Poller(cfg, prefetch=prefetch).poll(deadline=time.monotonic() - 1)
    assert prefetch.closed
    with pytest.raises(ChildProcessError):
        os.waitpid(prefetch.child, 0)
