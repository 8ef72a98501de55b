"""Benchmark: the lab's path classes (dyncc.lab.paths), CUBIC against BBR on each.

    sudo .venv/bin/python -m bench.lab_paths [--transfers 20] [--sizes 1000000,3000000]
        [--classes lossy,deep,deep-quiet,fine,lowrtt,alt-slow] [--add NAME=BASE]
        [--set lossy.loss=0.02 ...] [--relay-pps 1000,3000] [--poll 0.5]

Builds namespaces hpa-<id>-{e,r,<class>}: an edge serving bytes over TCP
(dyncc.lab.traffic serve), a router shaping each client link with the path
commands (htb + u32 per prefix, the random-drop BPF filter, the delay relay), and one
client namespace per class holding two IPv6 /56 client prefixes: the edge routes one
with `congctl cubic`, the other with `congctl bbr`.  The edge sends one segment per skb
(paths.sender_commands; --gso keeps 64 KB GSO bursts, to compare).

Per class, two threads (one per prefix, so CUBIC and BBR run at the same time, on their own
htb classes, or on one shared FIFO for a shared class such as deep-shared, deep's spec with both
prefixes in one FIFO; deep-quiet is deep's spec without the busy uplink; with --streams N, N
threads per prefix, each from its own address in the prefix) each run `--transfers`
transfers of every size: connect, request N bytes,
read them (goodput = N / time from request to last byte), then read the edge socket's
tcp_info with `ss -ti` (delivery_rate, min_rtt, retransmits) before closing; with --poll, also
the socket's delivery_rate every POLL seconds during the transfer, as the lab's collector samples
it (the "polled p10").  Prints per
class and size the p10 / p50 of delivery rate and goodput, BBR/CUBIC ratios, min_rtt;
the loss filter's drop share (clsact counters) against the edge's retransmitted segments;
the relay's CPU (user and system) per 1000 packets/s, during the transfers and, with
--relay-pps, on a UDP stream through the relay at fixed rates (system time includes the
kernel's forwarding of what the relay writes back).  --json writes the summary; --set and
--add try other parameters.  Everything is torn down at the end.
Documentation addresses only; needs root, clang, tc, ip, ss.  Not part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dyncc.lab import bpf_build, paths
from dyncc.lab.delay import DelayRelay, Uplink

PORT = 8080
EDGE_V6, ROUTER_V6 = "2001:db8:ff00::1", "2001:db8:ff00::2"
TICKS = os.sysconf("SC_CLK_TCK")
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)

#: bench class name -> class (alt-slow: the alternating class' slow spec; deep-quiet: deep without
#: its busy uplink; deep-shared: deep's spec with both prefixes in one FIFO)
BENCH_CLASSES = {
    "lossy": paths.CLASSES["lossy"],
    "deep": paths.CLASSES["deep"],
    "deep-quiet": paths.PathClass("deep-quiet", (dataclasses.replace(paths.DEEP, uplink_busy_ms=0.0),)),
    "deep-shared": paths.PathClass("deep-shared", (paths.DEEP,), shared=True),
    "fine": paths.CLASSES["fine"],
    "lowrtt": paths.CLASSES["lowrtt"],
    "alt-slow": paths.PathClass("alt-slow", (paths.ALTERNATING_SLOW,)),
}


def sh(*cmd: str, check: bool = True) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {proc.stderr.strip()}")
    return proc.stdout


def run_all(cmds: Sequence[Sequence[str]], check: bool = True) -> None:
    for cmd in cmds:
        sh(*cmd, check=check)


def enter_ns(ns: str) -> None:
    """setns(2) for the calling thread only."""
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {ns}")
    finally:
        os.close(fd)


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


# ------------------------------------------------------------------ the lab


@dataclass
class Lab:
    tag: str
    classes: dict[str, paths.PathClass]
    gso: bool
    objdir: Path
    relay: DelayRelay = field(default_factory=DelayRelay)
    server: subprocess.Popen[bytes] | None = None
    made: list[str] = field(default_factory=list)
    tick_ms: float = 1.0
    streams: int = 1  # client addresses (concurrent transfers) per prefix

    @property
    def edge(self) -> str:
        return f"hpa-{self.tag}-e"

    @property
    def rtr(self) -> str:
        return f"hpa-{self.tag}-r"

    def client_ns(self, k: int) -> str:
        return f"hpa-{self.tag}-c{k}"

    @staticmethod
    def prefix(k: int, j: int) -> str:
        return f"2001:db8:a:{k * 2 + j + 1:x}00::/56"

    @staticmethod
    def addr(k: int, j: int, stream: int = 0) -> str:
        return f"2001:db8:a:{k * 2 + j + 1:x}00::{stream + 2:x}"

    def build(self) -> None:
        names = [self.edge, self.rtr, *(self.client_ns(k) for k in range(len(self.classes)))]
        for ns in names:
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        e, r = self.edge, self.rtr
        sh("ip", "-n", e, "link", "add", "eth0", "type", "veth", "peer", "name", "edge", "netns", r)
        sh("ip", "-n", e, "addr", "add", f"{EDGE_V6}/64", "dev", "eth0", "nodad")
        sh("ip", "-n", r, "addr", "add", f"{ROUTER_V6}/64", "dev", "edge", "nodad")
        sh("ip", "-n", e, "link", "set", "eth0", "up")
        sh("ip", "-n", r, "link", "set", "edge", "up")
        sh("ip", "netns", "exec", r, "sysctl", "-q", "-w", "net.ipv6.conf.all.forwarding=1", "net.ipv4.ip_forward=1")
        sh("ip", "-n", e, "-6", "route", "add", "2001:db8::/32", "via", ROUTER_V6, "dev", "eth0", "congctl", "cubic")
        if not self.gso:
            run_all(paths.sender_commands(e, "eth0"))
        delayed: list[str] = []
        delays: dict[str, float] = {}
        uplinks: dict[str, Uplink] = {}
        for k, (name, pclass) in enumerate(self.classes.items()):
            spec = pclass.spec()
            c, dev = self.client_ns(k), f"c{k}"
            link_r, link_c = f"2001:db8:ff{k + 1:02x}::1", f"2001:db8:ff{k + 1:02x}::2"
            sh("ip", "-n", r, "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", c)
            sh("ip", "-n", r, "addr", "add", f"{link_r}/64", "dev", dev, "nodad")
            sh("ip", "-n", c, "addr", "add", f"{link_c}/64", "dev", "eth0", "nodad")
            sh("ip", "-n", r, "link", "set", dev, "up")
            sh("ip", "-n", c, "link", "set", "eth0", "up")
            sh("ip", "-n", c, "-6", "route", "add", "default", "via", link_r)
            prefixes = []
            for j, cc in enumerate(("cubic", "bbr")):
                for stream in range(self.streams):
                    sh("ip", "-n", c, "addr", "add", f"{self.addr(k, j, stream)}/128", "dev", "eth0", "nodad")
                sh("ip", "-n", r, "-6", "route", "add", self.prefix(k, j), "via", link_c, "dev", dev)
                sh(
                    "ip",
                    "-n",
                    e,
                    "-6",
                    "route",
                    "add",
                    self.prefix(k, j),
                    "via",
                    ROUTER_V6,
                    "dev",
                    "eth0",
                    "congctl",
                    cc,
                )
                prefixes.append(self.prefix(k, j))
            entries = pclass.entries(prefixes)
            run_all(paths.shaping_commands(r, dev, entries))
            if spec.loss > 0:
                obj = bpf_build.build_random_drop(spec.loss, self.objdir)
                run_all(paths.loss_commands(r, dev, str(obj)))
            if spec.delayed:
                delayed.append(dev)
                delays.update(paths.delay_map(entries))
                uplinks.update(paths.uplink_map(entries))
            print(f"# {name}: {spec}{' shared' if pclass.shared else ''}", flush=True)
        if delayed:
            run_all(paths.delay_commands(r, delayed))
            self.relay.start(
                r, paths.DELAY_DEV, delays, uplinks=uplinks, tick_ms=self.tick_ms, log_path=self.objdir / "relay.log"
            )
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.server = subprocess.Popen(
            ["ip", "netns", "exec", e, sys.executable, "-m", "dyncc.lab.traffic", "serve", "--port", str(PORT)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while f":{PORT}" not in sh("ss", "-N", e, "-ltnH"):
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.05)

    def destroy(self) -> None:
        code = self.relay.stop()
        if code not in (None, 0):
            print(f"# relay exit code {code}", file=sys.stderr)
        if self.server is not None and self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            try:
                self.server.wait(3)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait(2)
        for ns in self.made:
            for pid in sh("ip", "netns", "pids", ns, check=False).split():
                sh("kill", "-9", pid, check=False)
            sh("ip", "netns", "del", ns, check=False)
        self.made.clear()


# ------------------------------------------------------------------ transfers


@dataclass
class Sample:
    path_class: str
    cc: str
    size: int
    seconds: float
    goodput_bps: float
    delivery_bps: float
    min_rtt_ms: float
    retrans: int
    cc_seen: str
    polled_bps: list[float] = field(default_factory=list)  # delivery_rate every --poll seconds during the transfer


SS_RATE = re.compile(r"delivery_rate ([\d.]+)([kMG]?)bps")
SS_MINRTT = re.compile(r"minrtt:([\d.]+)")
SS_RETRANS = re.compile(r"retrans:\d+/(\d+)")
SS_CC = re.compile(r"\b(cubic|bbr)\b")
UNIT = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9}


def parse_ss(text: str) -> tuple[float, float, int, str]:
    rate = SS_RATE.search(text)
    minrtt = SS_MINRTT.search(text)
    retrans = SS_RETRANS.search(text)
    cc = SS_CC.search(text)
    return (
        float(rate.group(1)) * UNIT[rate.group(2)] if rate else float("nan"),
        float(minrtt.group(1)) if minrtt else float("nan"),
        int(retrans.group(1)) if retrans else 0,
        cc.group(1) if cc else "?",
    )


def poll_rates(lab: Lab, src: str, every: float, done: threading.Event, out: list[float]) -> None:
    """The edge socket's delivery_rate every `every` s until `done`, as the lab's collector samples it."""
    while not done.wait(every):
        rate = parse_ss(sh("ss", "-N", lab.edge, "-tinH", "state", "established", "dst", f"[{src}]", check=False))[0]
        if rate == rate:
            out.append(rate)


def transfers(
    lab: Lab,
    k: int,
    name: str,
    j: int,
    cc: str,
    sizes: list[int],
    count: int,
    out: list[Sample],
    stop: threading.Event,
    poll: float = 0.0,
    stream: int = 0,
) -> None:
    enter_ns(lab.client_ns(k))
    src = lab.addr(k, j, stream)
    for _ in range(20):  # neighbour discovery on fresh links: the first SYN may fail
        try:
            with socket.create_connection((EDGE_V6, PORT), timeout=5, source_address=(src, 0)):
                break
        except OSError:
            time.sleep(0.3)
    for i in range(count):
        for size in sizes if i % 2 == 0 else sizes[::-1]:
            if stop.is_set():
                return
            try:
                with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
                    s.settimeout(60)
                    s.bind((src, 0))
                    s.connect((EDGE_V6, PORT))
                    polled: list[float] = []
                    done = threading.Event()
                    poller = threading.Thread(target=poll_rates, args=(lab, src, poll, done, polled), daemon=True)
                    if poll > 0:
                        poller.start()
                    t0 = time.monotonic()
                    s.sendall(struct.pack(">Q", size))
                    left = size
                    while left > 0:
                        got = s.recv(min(left, 1 << 20))
                        if not got:
                            raise ConnectionError("closed early")
                        left -= len(got)
                    dt = time.monotonic() - t0
                    done.set()
                    if poll > 0:
                        poller.join()
                    info = sh("ss", "-N", lab.edge, "-tinH", "state", "established", "dst", f"[{src}]")
            except OSError as exc:
                print(f"# {name}/{cc}: transfer failed: {exc}", file=sys.stderr)
                continue
            rate, minrtt, retrans, seen = parse_ss(info)
            out.append(Sample(name, cc, size, dt, size * 8 / dt, rate, minrtt, retrans, seen, polled))
        time.sleep(0.2)


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    if not v:
        return float("nan")
    return v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))]


def summarize(samples: list[Sample], classes: Sequence[str], sizes: list[int]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    print(
        f"{'class':9} {'size':>5} {'cc':5} {'n':>3} {'deliv p10':>9} {'p50':>7} {'goodput p10':>11} {'p50':>7}"
        f" {'minrtt':>6} {'retr':>5}"
    )
    for name in classes:
        for size in [*sizes, 0]:
            row: dict[str, float] = {}
            for cc in ("cubic", "bbr"):
                sel = [s for s in samples if s.path_class == name and s.cc == cc and (size == 0 or s.size == size)]
                d = [s.delivery_bps / 1e6 for s in sel]
                g = [s.goodput_bps / 1e6 for s in sel]
                row[f"{cc}_d10"], row[f"{cc}_d50"] = pct(d, 0.1), pct(d, 0.5)
                row[f"{cc}_g10"], row[f"{cc}_g50"] = pct(g, 0.1), pct(g, 0.5)
                row[f"{cc}_minrtt"] = pct([s.min_rtt_ms for s in sel], 0.5)
                polled = [r / 1e6 for s in sel for r in s.polled_bps]
                row[f"{cc}_p10"], row[f"{cc}_polls"] = pct(polled, 0.1), len(polled)
                wrong = sum(1 for s in sel if s.cc_seen != cc)
                label = "all" if size == 0 else f"{size // 1000}k"
                print(
                    f"{name:9} {label:>5} {cc:5} {len(sel):3d} {row[f'{cc}_d10']:9.2f} {row[f'{cc}_d50']:7.2f}"
                    f" {row[f'{cc}_g10']:11.2f} {row[f'{cc}_g50']:7.2f} {row[f'{cc}_minrtt']:6.1f}"
                    f" {statistics.mean([s.retrans for s in sel]) if sel else 0:5.1f}"
                    + (f"  polled p10 {row[f'{cc}_p10']:.2f} of {len(polled)}" if polled else "")
                    + (f" WRONG CC {wrong}" if wrong else "")
                )
            for m in ("d10", "d50", "g10", "g50", "p10"):
                row[f"ratio_{m}"] = row[f"bbr_{m}"] / row[f"cubic_{m}"] if row[f"cubic_{m}"] else float("nan")
            print(
                f"{'':9} {'':5} bbr/cubic  delivery p10 {row['ratio_d10']:.2f} p50 {row['ratio_d50']:.2f}"
                f"   goodput p10 {row['ratio_g10']:.2f} p50 {row['ratio_g50']:.2f}"
                + (f"   polled delivery p10 {row['ratio_p10']:.2f}" if row["cubic_polls"] else "")
            )
            out[f"{name}/{'all' if size == 0 else size}"] = row
    return out


# ------------------------------------------------------------------ counters


def clsact_counters(ns: str, dev: str) -> tuple[int, int]:
    """(packets, dropped) of the clsact qdisc on dev (packets count GSO segments, drops count skbs)."""
    out = sh("tc", "-n", ns, "-s", "qdisc", "show", "dev", dev)
    m = re.search(r"qdisc clsact.*?Sent \d+ bytes (\d+) pkt \(dropped (\d+)", out, re.S)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def retrans_segs(ns: str) -> int:
    out = sh("ip", "netns", "exec", ns, "nstat", "-az", "TcpRetransSegs", "TcpOutSegs")
    m = re.search(r"TcpRetransSegs\s+(\d+)", out)
    return int(m.group(1)) if m else 0


def tun_packets(ns: str) -> int:
    out = sh("ip", "-n", ns, "-s", "-o", "link", "show", "dev", paths.DELAY_DEV)
    nums = re.findall(r"RX:.*?\\\s+\d+\s+(\d+)", out)
    return int(nums[0]) if nums else 0


def relay_cpu_udp(lab: Lab, k: int, pps_list: list[int], seconds: float) -> list[tuple[int, float, float, float]]:
    """UDP from client namespace k to the edge at fixed rates; (pps offered, relay pps, user and system CPU s/s)."""
    results = []
    pid = lab.relay.proc.pid if lab.relay.proc else 0
    sink_ready = threading.Event()
    stop = threading.Event()

    def sink() -> None:
        enter_ns(lab.edge)
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind((EDGE_V6, 9999))
            s.settimeout(0.2)
            sink_ready.set()
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    s.recv(2048)

    def send(pps: int, box: list[float]) -> None:
        enter_ns(lab.client_ns(k))
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind((lab.addr(k, 0), 0))
            payload = b"a" * 60
            t0 = time.monotonic()
            n = 0
            while (now := time.monotonic()) - t0 < seconds:
                due = int((now - t0) * pps)
                while n < due:
                    s.sendto(payload, (EDGE_V6, 9999))
                    n += 1
                time.sleep(max(0.0, t0 + (n + 1) / pps - time.monotonic()))
            box.append(n)

    t_sink = threading.Thread(target=sink, daemon=True)
    t_sink.start()
    sink_ready.wait(5)
    for pps in pps_list:
        box: list[float] = []
        c0, p0, t0 = cpu_times(pid), tun_packets(lab.rtr), time.monotonic()
        t = threading.Thread(target=send, args=(pps, box))
        t.start()
        t.join()
        time.sleep(0.3)
        c1, p1, t1 = cpu_times(pid), tun_packets(lab.rtr), time.monotonic()
        dt = t1 - t0
        results.append((pps, (p1 - p0) / dt, (c1[0] - c0[0]) / dt, (c1[1] - c0[1]) / dt))
    stop.set()
    t_sink.join(2)
    return results


# ------------------------------------------------------------------ main


def apply_sets(classes: dict[str, paths.PathClass], sets: list[str]) -> None:
    for item in sets:
        key, _, value = item.partition("=")
        name, _, attr = key.partition(".")
        pclass = classes[name]
        spec = pclass.specs[0]
        kind = type(getattr(spec, attr))
        spec = dataclasses.replace(spec, **{attr: kind(value)})
        classes[name] = dataclasses.replace(pclass, specs=(spec,))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transfers", type=int, default=20, help="transfers per size and cc")
    parser.add_argument("--sizes", default="1000000,3000000")
    parser.add_argument("--classes", default="lossy,deep,deep-quiet,fine,lowrtt,alt-slow")
    parser.add_argument("--set", action="append", default=[], metavar="CLASS.FIELD=VALUE")
    parser.add_argument(
        "--add", action="append", default=[], metavar="NAME=BASE", help="an extra class copied from BASE (then --set)"
    )
    parser.add_argument("--gso", action="store_true", help="keep GSO bursts on the edge (no sender_commands)")
    parser.add_argument("--relay-pps", default="", help="UDP rates through the relay to measure its CPU")
    parser.add_argument("--relay-tick-ms", type=float, default=1.0)
    parser.add_argument(
        "--poll", type=float, default=0.0, help="also sample delivery_rate every POLL s of each transfer (as the lab)"
    )
    parser.add_argument(
        "--streams",
        type=int,
        default=1,
        help="concurrent transfers per prefix (the lab: one client per lossy or deep prefix, three per alternating)",
    )
    parser.add_argument("--json", type=Path, help="write the summary here")
    args = parser.parse_args(argv)
    if os.geteuid() != 0 or not shutil.which("tc"):
        print("needs root and tc", file=sys.stderr)
        return 2
    names = [n for n in args.classes.split(",") if n]
    classes = {n: BENCH_CLASSES[n] for n in names}
    for item in args.add:
        new, _, base = item.partition("=")
        classes[new] = dataclasses.replace(BENCH_CLASSES[base], name=new)
        names.append(new)
    apply_sets(classes, args.set)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    objdir = Path(tempfile.mkdtemp(prefix="hpa-bench-"))
    lab = Lab(uuid.uuid4().hex[:5], classes, args.gso, objdir, tick_ms=args.relay_tick_ms, streams=args.streams)
    samples: list[Sample] = []
    stop = threading.Event()
    try:
        lab.build()
        lossy = [(k, f"c{k}") for k, c in enumerate(classes.values()) if c.spec().loss > 0]
        before = {dev: clsact_counters(lab.rtr, dev) for _, dev in lossy}
        rs0 = retrans_segs(lab.edge)
        pid = lab.relay.proc.pid if lab.relay.proc else 0
        cpu0, tun0, t0 = (cpu_times(pid) if pid else (0.0, 0.0)), (tun_packets(lab.rtr) if pid else 0), time.monotonic()
        threads = [
            threading.Thread(
                target=transfers, args=(lab, k, name, j, cc, sizes, args.transfers, samples, stop, args.poll, stream)
            )
            for k, name in enumerate(classes)
            for j, cc in enumerate(("cubic", "bbr"))
            for stream in range(args.streams)
        ]
        for t in threads:
            t.start()
        try:
            for t in threads:
                t.join()
        except KeyboardInterrupt:
            stop.set()
            for t in threads:
                t.join()
        elapsed = time.monotonic() - t0
        summary = summarize(samples, names, sizes)
        for _, dev in lossy:
            pk, dr = (a - b for a, b in zip(clsact_counters(lab.rtr, dev), before[dev], strict=True))
            print(f"# loss filter {dev}: {dr} drops / {pk} packets = {dr / max(pk, 1):.4f}")
        print(f"# edge retransmitted segments: {retrans_segs(lab.edge) - rs0}")
        if pid:
            (u1, s1), pk = cpu_times(pid), tun_packets(lab.rtr) - tun0
            user, system, kpps = (u1 - cpu0[0]) / elapsed, (s1 - cpu0[1]) / elapsed, pk / elapsed / 1000
            print(
                f"# relay during transfers: {1000 * kpps:.0f} packets/s; CPU user {100 * user:.1f}%"
                f" system {100 * system:.1f}% = per 1000 packets/s: user {100 * user / max(kpps, 1e-9):.1f}%"
                f" system {100 * system / max(kpps, 1e-9):.1f}%"
            )
            if args.relay_pps:
                k = next(k for k, c in enumerate(classes.values()) if c.spec().delay_ms > 0)
                for pps, got, user, system in relay_cpu_udp(lab, k, [int(p) for p in args.relay_pps.split(",")], 8.0):
                    print(
                        f"# relay UDP {pps} packets/s offered: {got:.0f} relayed/s, CPU user {100 * user:.1f}%"
                        f" system {100 * system:.1f}% = per 1000 packets/s: user {100 * user / (got / 1000):.1f}%"
                        f" system {100 * system / (got / 1000):.1f}%"
                    )
        if args.json:
            args.json.write_text(json.dumps(summary, indent=1))
    finally:
        stop.set()
        lab.destroy()
        shutil.rmtree(objdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
