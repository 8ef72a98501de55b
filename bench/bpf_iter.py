"""Benchmark: the TCP iterator that switches open connections (collector/agent/bpf/iterate.py).

Runs in a throwaway namespace `dit-bench-*` (documentation addresses only, on loopback; needs
root).  Holder processes each open up to --per-process connections to their own listener and
keep both ends (the open-files limit is 20000 per process): the accepted ends have their peer in
198.51.100.0/24 or 2001:db8:100::/56 (half each), the connecting ends have their peer in
192.0.2.2 / 2001:db8:1::2.  So for N connections the iterator walks 2N TCP sockets and switches
the N accepted ones.  For each N in --counts (the namespace grows from one to the next), --runs
times (after one untimed warm-up run):

- `switch`: one `run_iterator` (load the object, fill the tries, walk, read the counters) that
  moves all N between bbr and cubic (the direction alternates; every run must switch N);
- `walk`: the same run with empty tries (load + walk, nothing matched, nothing switched);
- `ss -tin`, the reference: `ip netns exec NS ss -Htin` over the same sockets, output discarded.

Wall time and CPU time (this process's user+sys for the iterator runs, which includes the
kernel's walk in the reading thread; the child's for `ss`), medians over the runs, and the ratio
of `switch` to `ss -tin`.

    python -m bench.bpf_iter [--counts 10000 100000] [--runs 3] [--per-process 9000]
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from collector.agent.bpf.build import build_object
from collector.agent.bpf.iter_plan import ITER_PROGRAM, Switch, iter_maps
from collector.agent.bpf.iterate import run_iterator

PREFIXES = ("198.51.100.0/24", "2001:db8:100::/56")
V6_SOURCES = [f"2001:db8:100::{i:x}" for i in range(1, 17)]

HOLDER = textwrap.dedent("""
    import resource, socket, sys
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    family, server, port, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    sources = sys.argv[5].split(",")
    fam = socket.AF_INET6 if family == "6" else socket.AF_INET
    lst = socket.socket(fam, socket.SOCK_STREAM)
    lst.bind((server, port)); lst.listen(4096)
    held = []
    for i in range(count):
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_IP, 24, 1)  # IP_BIND_ADDRESS_NO_PORT: the port is chosen at connect
        s.bind((sources[i % len(sources)], 0))
        s.connect((server, port))
        held.append(s)
        if i % 1000 == 999 or i == count - 1:
            while len(held) < 2 * (i + 1):
                held.append(lst.accept()[0])
    print("ready", flush=True)
    sys.stdin.read()
""")


def sh(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


class Bench:
    def __init__(self, ns: str, per_process: int) -> None:
        self.ns = ns
        self.per_process = per_process
        self.holders: list[subprocess.Popen[str]] = []
        self.count = 0

    def grow(self, total: int) -> None:
        """Open connections (half IPv4, half IPv6) until `total` are held."""
        while self.count < total:
            n = min(self.per_process, total - self.count)
            index = len(self.holders)
            v6 = index % 2 == 1
            args = (
                ["6", "2001:db8:1::2", str(9000 + index), str(n), ",".join(V6_SOURCES)]
                if v6
                else ["4", "192.0.2.2", str(9000 + index), str(n), ",".join(f"198.51.100.{i}" for i in range(1, 251))]
            )
            proc = subprocess.Popen(
                ["ip", "netns", "exec", self.ns, sys.executable, "-c", HOLDER, *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"holder {index} failed ({n} connections)")
            self.holders.append(proc)
            self.count += n

    def close(self) -> None:
        for proc in self.holders:
            if proc.stdin:
                proc.stdin.close()
        for proc in self.holders:
            proc.wait(60)


def cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(fn: Callable[[], object], cpu: Callable[[], float]) -> tuple[float, float, object]:
    c0, t0 = cpu(), time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, cpu() - c0, result


def server_algorithms(ns: str) -> dict[str, int]:
    """Algorithms of the accepted ends (peer in the selected prefixes), counted from `ss -Htin`."""
    counts: dict[str, int] = {}
    peer_selected = False
    for line in sh("ip", "netns", "exec", ns, "ss", "-Htin").splitlines():
        if not line[:1].isspace():
            fields = line.split()
            peer = fields[-1] if fields else ""
            peer_selected = peer.startswith(("198.51.100.", "[2001:db8:100::"))
        elif peer_selected:
            cc = line.split()[0]
            counts[cc] = counts.get(cc, 0) + 1
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[10000, 100000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--per-process", type=int, default=9000)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root (namespaces, BPF)", file=sys.stderr)
        return 2
    build_dir = tempfile.TemporaryDirectory(prefix="dit-bench-")
    obj = build_object(Path(build_dir.name), program=ITER_PROGRAM)
    ns = f"dit-bench-{uuid.uuid4().hex[:6]}"
    sh("ip", "netns", "add", ns)
    bench = Bench(ns, args.per_process)
    try:
        nsx = ("ip", "netns", "exec", ns)
        sh(*nsx, "ip", "link", "set", "lo", "up")
        sh(*nsx, "sysctl", "-qw", "net.ipv4.tcp_congestion_control=bbr")
        sh(*nsx, "ip", "addr", "add", "192.0.2.2/32", "dev", "lo")
        sh(*nsx, "ip", "addr", "add", "198.51.100.1/24", "dev", "lo")  # the whole /24 is local on lo
        for addr in ["2001:db8:1::2", *V6_SOURCES]:
            sh(*nsx, "ip", "-6", "addr", "add", f"{addr}/128", "dev", "lo", "nodad")
        print(f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs; object {obj.name}")
        print("| connections | step | wall, median [range] | CPU, median [range] | wall vs `ss -tin` |")
        print("|---|---|---|---|---|")
        empty = iter_maps({})
        run_iterator(obj, empty, ns)  # warm-up: libbpf and ctypes set-up, once per agent process
        for count in args.counts:
            started = time.monotonic()
            bench.grow(count)
            opened = time.monotonic() - started
            to_bbr = iter_maps({ipaddress.ip_network(p): Switch("bbr") for p in PREFIXES})
            run_iterator(obj, to_bbr, ns)  # untimed: the earlier count's connections back on bbr
            assert server_algorithms(ns) == {"bbr": count}, "connections not all on bbr to start"
            rows: dict[str, list[tuple[float, float]]] = {"switch": [], "walk": [], "ss": []}
            target, other = "cubic", "bbr"
            for _ in range(args.runs):
                maps = iter_maps({ipaddress.ip_network(p): Switch(target, 0, only_from=other) for p in PREFIXES})
                wall, cpu, counts = timed(functools.partial(run_iterator, obj, maps, ns), cpu_self)
                assert isinstance(counts, dict) and counts["switched"] == count, counts
                rows["switch"].append((wall, cpu))
                wall, cpu, counts = timed(lambda: run_iterator(obj, empty, ns), cpu_self)
                assert isinstance(counts, dict) and counts["switched"] == 0 and counts["visited"] >= 2 * count
                rows["walk"].append((wall, cpu))
                wall, cpu, _ = timed(
                    lambda: subprocess.run([*nsx, "ss", "-Htin"], check=True, stdout=subprocess.DEVNULL),
                    cpu_children,
                )
                rows["ss"].append((wall, cpu))
                target, other = other, target
            final = server_algorithms(ns)
            assert final == {other: count}, final
            ss_wall = statistics.median(w for w, _ in rows["ss"])
            for step, label in (("switch", "switch all"), ("walk", "walk, nothing matched"), ("ss", "`ss -tin`")):
                walls, cpus = [w for w, _ in rows[step]], [c for _, c in rows[step]]
                ratio = statistics.median(walls) / ss_wall
                print(
                    f"| {count} | {label} | {fmt(walls)} | {fmt(cpus)} | x{ratio:.2f} |",
                    flush=True,
                )
            print(f"<!-- {count}: opened in {opened:.1f}s; load average {os.getloadavg()[0]:.1f} -->", flush=True)
    finally:
        bench.close()
        subprocess.run(["ip", "netns", "del", ns], check=False)
        build_dir.cleanup()
    return 0


def fmt(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} ms [{min(values) * 1000:.0f}–{max(values) * 1000:.0f}]"


if __name__ == "__main__":
    sys.exit(main())
