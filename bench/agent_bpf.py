"""Benchmark: the cost of `dyncc agent --enforce bpf` on new connections, and its map updates.

Runs in throwaway namespaces and cgroups (documentation addresses only; needs root): an edge
namespace whose server (2 processes, one response of --bytes per connection) runs in cgroup
`dyncc-test-bench-*`, and a client namespace whose 2 client processes (another cgroup) open,
read and close connections back to back.  In one run, rounds of --seconds alternate between:

- `off`: no program attached (the reference);
- `unselected`: the program attached with --prefixes entries, the client's prefix not among them;
- `watched`: the client's prefix selected with a threshold no connection reaches: the program
  runs its per-RTT callback (a trie lookup) on every ACK of every connection, never switching;
- `selected`: the client's prefix selected with the default threshold: every connection is
  switched to bbr by the program after 100 KB;
- `bbr-route`: no program, a route `congctl bbr` for the client's prefix: every connection is bbr
  from its first packet (what `selected` costs because of bbr itself, not the program).

Each mode reports the median over its rounds of connections per second (summed over the two
clients, each over its own loop time) and CPU per connection (usage_usec of both cgroups while
the clients loop: the server's and the client's processes, with the softirq work they run), and
the ratio to `off`; and, from the kernel's BPF run-time statistics (BPF_ENABLE_STATS, on for
the run only), the program's own runs and time per connection.  Then a map update: --prefixes
entries (half IPv4 /24s, half IPv6 /56s) applied with read-back, replaced by another set,
removed (kill switch).

    python -m bench.agent_bpf [--seconds 3] [--rounds 3] [--bytes 153600] [--prefixes 10000]
"""

from __future__ import annotations

import argparse
import ctypes
import ipaddress
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

from collector.agent.bpf.apply import BpfApplier, netns_cookie
from collector.agent.bpf.build import build_object
from collector.agent.bpf.maps import libbpf
from collector.agent.bpf.prog import BpfProgram, bpftool, default_cgroup
from collector.agent.plan import Wanted

SERVER = textwrap.dedent("""
    import os, socket, sys
    size = int(sys.argv[1])
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("0.0.0.0", 8080)); lst.listen(512)
    body = b"x" * size
    print("ready", flush=True)  # the listener is up; both processes accept on it
    os.fork()
    while True:
        conn, _ = lst.accept()
        conn.recv(16)
        conn.sendall(body)
        conn.close()
""")

CLIENT = textwrap.dedent("""
    import socket, sys, time
    src, size, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    print("ready", flush=True)
    sys.stdin.readline()  # go
    done, start = 0, time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00")
        s.bind((src, 0)); s.connect(("192.0.2.2", 8080)); s.sendall(b"GET\\n")
        got = 0
        while got < size:
            chunk = s.recv(1 << 17)
            if not chunk:
                break
            got += len(chunk)
        s.close()
        done += 1
    print(done, time.monotonic() - start, flush=True)
""")

CLIENT_ADDR = "198.51.100.10"


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)


def selection(count: int, offset: int, client: bool = False, threshold: int = 0) -> dict[str, Wanted]:
    """Half IPv6 /56s under 2001:db8::/32, half IPv4 /24s from 100.0.0.0 up (map entries only, no traffic)."""
    out: dict[str, Wanted] = {}
    v6 = int(ipaddress.IPv6Address("2001:db8::"))
    for i in range(offset, offset + count // 2):
        p6 = str(ipaddress.IPv6Network((v6 + (i << 72), 56)))
        out[p6] = Wanted(p6, "bbr", False, threshold)
        p4 = str(ipaddress.IPv4Network(((100 << 24) + (i << 8), 24)))  # 100.0.0.0/8 upward: never the client
        out[p4] = Wanted(p4, "bbr", False, threshold)
    if client:
        out["198.51.100.0/24"] = Wanted("198.51.100.0/24", "bbr", False, threshold)
    return out


def in_cgroup(cgroup: Path, netns: str) -> list[str]:
    """A command prefix: join `cgroup` (before `ip netns exec` remounts /sys), then run in `netns`."""
    return ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec ip netns exec "$0" "$@"', netns]


def cpu_usec(cgroups: list[Path]) -> int:
    total = 0
    for cg in cgroups:
        for line in (cg / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                total += int(value)
    return total


def run_round(client: str, cgroups: list[Path], client_cg: Path, size: int, seconds: float) -> tuple[float, float, int]:
    """(connections per second, CPU microseconds per connection, connections) of 2 client processes.

    The clients start, say ready, and run their loop on "go": neither their start-up nor the
    harness is in the figures (CPU is read just before "go" and after both have finished).
    """
    procs = [
        subprocess.Popen(
            [*in_cgroup(client_cg, client), sys.executable, "-c", CLIENT, CLIENT_ADDR, str(size), str(seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    before = cpu_usec(cgroups)
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    results = [p.communicate(timeout=seconds + 30)[0].split() for p in procs]
    after = cpu_usec(cgroups)
    done = sum(int(r[0]) for r in results)
    rate = sum(int(r[0]) / float(r[1]) for r in results)
    return rate, (after - before) / max(done, 1), done


def prog_stats(program: BpfProgram) -> tuple[int, int]:
    """(run_time_ns, run_cnt) of the attached program (kernel BPF stats; 0s when not loaded)."""
    if program.prog_pin is None or not program.prog_pin.exists():
        return 0, 0
    data = bpftool("prog", "show", "pinned", str(program.prog_pin))
    return int(data.get("run_time_ns", 0)), int(data.get("run_cnt", 0))


def enable_bpf_stats() -> int:
    """BPF_ENABLE_STATS(BPF_STATS_RUN_TIME): run-time stats while the returned fd is open (-1 if refused)."""
    lib = libbpf()
    lib.bpf_enable_stats.argtypes = [ctypes.c_int]
    return int(lib.bpf_enable_stats(0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bytes", type=int, default=150 * 1024)
    parser.add_argument("--prefixes", type=int, default=10000)
    args = parser.parse_args(argv)
    root = default_cgroup()
    if root is None:
        print("no cgroup v2 hierarchy", file=sys.stderr)
        return 1
    tag = uuid.uuid4().hex[:6]
    edge, client = f"dbpf-be-{tag}", f"dbpf-bc-{tag}"
    server_cg, client_cg = root / f"dyncc-test-bench-s-{tag}", root / f"dyncc-test-bench-c-{tag}"
    tmp_a, tmp_b = f"v{uuid.uuid4().hex[:8]}", f"v{uuid.uuid4().hex[:8]}"
    made: list[str] = []
    server = None
    with tempfile.TemporaryDirectory(prefix="dyncc-bench-bpf-") as tmp:
        program = BpfProgram(Path("/sys/fs/bpf") / f"dyncc-test-bench-{tag}", server_cg, build_object(Path(tmp)))
        try:
            for ns in (edge, client):
                sh("ip", "netns", "add", ns)
                made.append(ns)
                sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "link", "add", tmp_a, "type", "veth", "peer", "name", tmp_b)
            sh("ip", "link", "set", tmp_a, "netns", edge)
            sh("ip", "link", "set", tmp_b, "netns", client)
            for ns, dev, v4 in ((edge, tmp_a, "192.0.2.2/24"), (client, tmp_b, "192.0.2.1/24")):
                sh("ip", "-n", ns, "link", "set", dev, "up")
                sh("ip", "-n", ns, "addr", "add", v4, "dev", dev)
            sh("ip", "-n", client, "addr", "add", f"{CLIENT_ADDR}/32", "dev", "lo")
            sh("ip", "-n", edge, "route", "add", "default", "via", "192.0.2.1", "congctl", "cubic")
            server_cg.mkdir()
            client_cg.mkdir()
            server = subprocess.Popen(
                [*in_cgroup(server_cg, edge), sys.executable, "-c", SERVER, str(args.bytes)],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert server.stdout is not None
            line = server.stdout.readline()
            assert line.strip() == "ready", f"server: {line!r}"
            applier = BpfApplier(program, netns_cookie=netns_cookie(edge))
            modes: dict[str, dict[str, Wanted]] = {
                "off": {},
                "unselected": selection(args.prefixes, 0),
                "watched": selection(args.prefixes, 0, client=True, threshold=1 << 40),
                "selected": selection(args.prefixes, 0, client=True),
                "bbr-route": {},
            }
            results: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
            switched = {"watched": 0, "selected": 0}
            switched_before = 0
            runs: dict[str, list[tuple[int, int, int]]] = {m: [] for m in modes}  # (ns, calls, connections)
            stats_fd = enable_bpf_stats()
            last = (0, 0)
            route = ["ip", "-n", edge, "route", "replace", "198.51.100.0/24", "via", "192.0.2.1", "congctl"]
            for _ in range(args.rounds):
                for mode, wanted in modes.items():
                    outcome = applier.apply(wanted)
                    if not outcome.ok:
                        print(f"{mode}: apply FAILED {outcome.errors[:3]}", file=sys.stderr)
                        return 1
                    sh(*route, "bbr" if mode == "bbr-route" else "cubic")
                    rate, cpu, done = run_round(client, [server_cg, client_cg], client_cg, args.bytes, args.seconds)
                    results[mode].append((rate, cpu))
                    now = prog_stats(program)
                    if now != (0, 0):
                        runs[mode].append((now[0] - last[0], now[1] - last[1], done))
                    last = now
                    if mode in ("watched", "selected"):  # counters go with the program, removed in `off`
                        counts = applier.counters()
                        switched[mode] += counts.get("switched", 0) - switched_before
                        switched_before = counts.get("switched", 0)
                    else:
                        switched_before = 0
            base_rate = statistics.median(r for r, _ in results["off"])
            base_cpu = statistics.median(c for _, c in results["off"])
            print(f"{args.bytes} B per connection, {args.rounds} rounds of {args.seconds:g} s per mode, 2+2 processes")
            for mode, rows in results.items():
                rate, cpu = statistics.median(r for r, _ in rows), statistics.median(c for _, c in rows)
                spread = f"{min(r for r, _ in rows):.0f}-{max(r for r, _ in rows):.0f}"
                print(
                    f"{mode:10s} {rate:8.0f} conn/s (range {spread}) x{rate / base_rate:.3f}   "
                    f"{cpu:7.1f} us CPU/conn x{cpu / base_cpu:.3f} ({cpu - base_cpu:+.1f} us)"
                )
            print(f"connections switched by the program: {switched} (watched rounds must be 0)")
            if stats_fd >= 0:
                os.close(stats_fd)
                for mode, per in runs.items():
                    if per:
                        run_ns, calls, conns = (sum(x[i] for x in per) for i in range(3))
                        print(
                            f"program in {mode:10s}: {calls / max(conns, 1):5.1f} runs/conn, "
                            f"{run_ns / max(calls, 1):6.0f} ns/run, {run_ns / max(conns, 1) / 1000:6.2f} us/conn"
                        )

            print(f"map update, {args.prefixes} prefixes, each step with read-back:")
            applier.apply({})
            program.ensure_loaded()  # the first apply's load and attach are not part of the update
            program.ensure_attached()
            first, second = selection(args.prefixes, 0), selection(args.prefixes, args.prefixes)
            for label, wanted in (("add", first), ("replace", second), ("remove", {})):
                if label == "remove":
                    started = time.monotonic()
                    held = sum(len(m) for m in applier.read_maps().values())
                    print(f"read-back alone: {held} entries in {time.monotonic() - started:.3f} s")
                outcome = applier.apply(wanted)
                if not outcome.ok:
                    print(f"{label}: FAILED {outcome.errors[:3]}", file=sys.stderr)
                    return 1
                print(f"{label:8s} {outcome.seconds:.3f} s ({outcome.summary()})")
        finally:
            program.remove()
            if server is not None:
                server.kill()
                server.wait(10)
            for ns in made:
                for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
                    subprocess.run(["kill", "-9", pid], check=False)
                subprocess.run(["ip", "netns", "del", ns], check=False)
            time.sleep(0.2)
            for cg in (server_cg, client_cg):
                if cg.exists():
                    cg.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
