"""Benchmark: `dyncc collect --once` against `ss -tin` on ~100k established loopback connections.

    sudo .venv/bin/python bench/collector.py [--conns 100000] [--rounds 5] [--brokers 127.0.0.1:19092] [--timeline]

Creates a namespace (dbench-col-*, --ns-prefix), opens the connections from several holder
processes (the open-files limit is 20000 per process; each holder keeps both
ends of its connections), makes one untimed Kafka run (it creates the topic and
warms the broker), then alternates `ss -tin > /dev/null`, the raw dump (below),
`dyncc collect --once --sink file` and `dyncc collect --once --sink kafka`
(the collector runs in the host namespace and dumps the benchmark namespace
with --netns, so it can reach the broker on 127.0.0.1), and then reads the
per-poll time of a long-running collector (no interpreter start-up) from its
log, with a raw dump in the idle time after each of its polls.  Prints each
command's time, sockets/s, its speed ratio to ss (ss time / its time) and to
the raw dump (raw dump time / its time), its CPU time and the raw dump's CPU
time over it (on a loaded 2-core machine the wall-clock ratio follows this
CPU ratio), and peak RSS (from wait4).

The raw dump is the floor any collector can reach: this process opens a
sock_diag socket in the namespace exactly as the collector does (same socket
buffer size), sends the same requests (both families in turn, same states and
INET_DIAG_INFO/VEGASINFO/CONG/SKMEMINFO extensions) and only recv_into()s every
reply datagram into one preallocated 64 KiB buffer (the collector's receive
size: no datagram is truncated), counting datagrams and bytes and looking for
NLMSG_DONE at the datagram's end; nothing is parsed or copied.  One untimed raw
dump first counts the messages (a header walk) and checks them against the
sockets.  With --timeline the
one-shot runs log their timeline (-v) and the median of each moment is printed.
Everything (namespace, holders, topic) is torn down at the end.
Note: the kernel walks one socket hash table for every namespace, so other
sockets on the host (other benchmarks, tests) slow every dump; run it alone.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(REPO)  # run as a script: `collector` must be the package, not this file

from collector.netlink.sockdiag import (  # noqa: E402 - after the path fix above
    DEFAULT_EXT,
    DEFAULT_STATES,
    RECV_SIZE,
    TCP_STATES,
    build_request,
    open_diag_socket,
    state_mask,
    walk_messages,
)

PY = sys.executable
DYNCC = str(Path(PY).with_name("dyncc"))


def hold(conns: int, port: int, addr: str) -> None:
    """Holder process: `conns` connections to our own listener, both ends kept open."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind((addr, port))
    lst.listen(4096)
    keep: list[socket.socket] = []
    payload = b"x" * 200
    done = 0
    while done < conns:
        step = min(1000, conns - done)
        clients = []
        for _ in range(step):
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.connect((addr, port))
            clients.append(c)
        for c in clients:
            s, _ = lst.accept()
            c.sendall(payload)
            s.sendall(payload[:100])
            keep.extend((c, s))
        done += step
    lst.close()
    print("ready", flush=True)
    sys.stdin.read()  # until the parent closes our stdin


def timed(
    cmd: list[str], stdout: int | None = subprocess.DEVNULL, moments: dict[str, list[float]] | None = None
) -> tuple[float, int, int, float]:
    """(seconds, exit code, peak RSS in KiB, CPU seconds) of one command.

    The CPU time is the process's and its reaped children's (a one-shot
    collector's dump helper; ss under `ip netns exec`), user + system.

    With `moments`, the command's `timeline:` log line (a one-shot collector
    run with -v, collector/telemetry/timeline.py) is added to it: each moment
    in milliseconds since this function started the process, and "exit".
    """
    started = time.monotonic_ns()
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as errfile:  # a pipe could fill up and block a chatty -v run
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=errfile)
        _, status, usage = os.wait4(proc.pid, 0)
        took = time.perf_counter() - t0
        errfile.seek(0)
        err = errfile.read().decode(errors="replace")
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        print(f"  {' '.join(cmd[-6:])} exited {proc.returncode}: {err.strip()[-500:]}", file=sys.stderr)
    if moments is not None:
        _add_moments(err, started, took, moments)
    return took, proc.returncode, usage.ru_maxrss, usage.ru_utime + usage.ru_stime


def _add_moments(err: str, started_ns: int, took: float, moments: dict[str, list[float]]) -> None:
    m = re.search(r"timeline: start=([\d.]+)((?: [\w]+=[+\d.]+(?:ms)?)*)", err)
    if not m:
        return
    base = float(m.group(1)) - started_ns / 1e6  # the collector's first mark, ms after the spawn
    moments.setdefault("start", []).append(base)
    for name, value in re.findall(r"(\w+)=([+\d.]+(?:ms)?)", m.group(2)):
        if value.endswith("ms"):  # a time spent, not a moment
            moments.setdefault(name, []).append(float(value[:-2]))
        else:
            moments.setdefault(name, []).append(base + float(value))
    moments.setdefault("exit", []).append(took * 1e3)


def raw_dump(ns: str, count: bool = False) -> tuple[float, float, int, int, int]:
    """(seconds, CPU seconds, datagrams, bytes, messages) of the bare sock_diag dump of `ns`: recv only.

    Messages are counted (a header walk per datagram) only with `count`; the
    timed dumps leave them at 0.
    """
    states = state_mask([TCP_STATES[s] for s in DEFAULT_STATES])
    buf = bytearray(RECV_SIZE)
    view = memoryview(buf)
    done_tail = (20).to_bytes(4, "little") + (3).to_bytes(2, "little")  # NLMSG_DONE, 20 bytes
    datagrams = nbytes = messages = 0
    c0 = _thread_cpu()
    t0 = time.perf_counter()
    sock = open_diag_socket(ns)  # the collector's socket: SO_RCVBUFFORCE to its RCVBUF
    try:
        for seq, family in enumerate((socket.AF_INET, socket.AF_INET6), 1):
            sock.sendall(build_request(family, states, DEFAULT_EXT, seq))
            while True:
                n = sock.recv_into(view, RECV_SIZE)
                datagrams += 1
                nbytes += n
                if count:
                    walk = walk_messages(buf, 0, n)
                    messages += len(walk.offsets)
                    if walk.error:
                        raise RuntimeError(f"raw dump failed: {walk.error}")
                if n < 20 or buf[n - 20 : n - 14] == done_tail or buf[4:6] in (b"\x02\x00", b"\x03\x00"):
                    break
    finally:
        sock.close()
    return time.perf_counter() - t0, _thread_cpu() - c0, datagrams, nbytes, messages


def _thread_cpu() -> float:
    """User + system CPU seconds of this thread (the kernel's dump work runs in its recv calls)."""
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int) -> float:
    """User + system CPU seconds of a running process, all its threads (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def daemon_polls(
    ns: str, brokers: str, topic: str, polls: int, raw: list[tuple[float, float]] | None = None
) -> list[tuple[float, float]]:
    """(seconds, CPU seconds) of each poll of a long-running collector (no interpreter start-up).

    The seconds are the poll's `took` from its log; the CPU time is the whole
    process's (librdkafka's threads included) from one poll's log line to the
    next, i.e. per poll cycle (clock-tick resolution).  With `raw`, a raw dump
    is timed in the idle time after each counted poll and its (seconds, CPU
    seconds) appended to it.
    """
    cmd = [
        DYNCC,
        "collect",
        "--netns",
        ns,
        "--no-default-excludes",
        "--interval",
        "2s",
        "--jitter",
        "0s",
        "--brokers",
        brokers,
        "--topic",
        topic,
        "--host",
        "bench",
        "--metrics-port",
        "0",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took: list[tuple[float, float]] = []
    assert proc.stderr is not None
    cpu_then = 0.0
    try:
        for line in proc.stderr:
            m = re.search(r"poll (\d+): .* took=([\d.]+)s", line)
            if not m:
                continue
            cpu_now = _process_cpu(proc.pid)
            if int(m.group(1)) > 1:  # the first poll warms caches
                took.append((float(m.group(2)), cpu_now - cpu_then))
            cpu_then = cpu_now
            if raw is not None and took:
                time.sleep(0.3)  # the poll's delivery settles; the next poll is ~1.5 s away
                raw.append(raw_dump(ns)[:2])
            if len(took) >= polls:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return took


def _delete_topic(brokers: str, topic: str) -> None:
    """Remove the topic the Kafka runs wrote (if it exists)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": brokers})  # kept alive until the futures resolve
    try:
        for future in admin.delete_topics([topic]).values():
            future.result(timeout=30)
    except KafkaException as exc:
        print(f"could not delete topic {topic}: {exc}", file=sys.stderr)


def count_sockets(ns: str) -> int:
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "ss", "-Htn", "state", "established"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.count("\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conns", type=int, default=100_000, help="sockets wanted (two per connection)")
    ap.add_argument("--per-proc", type=int, default=8_500, help="connections per holder process")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--brokers", default=os.environ.get("DYNCC_TEST_KAFKA", "127.0.0.1:19092"))
    ap.add_argument("--no-kafka", action="store_true")
    ap.add_argument("--topic-prefix", default="dbench_col_", help="prefix of the Kafka topic written")
    ap.add_argument("--ns-prefix", default="dbench-", help="prefix of the namespace made")
    ap.add_argument(
        "--timeline",
        action="store_true",
        help="run the one-shot collectors with -v and print the median time (ms after the spawn) "
        "of each moment of their timeline",
    )
    ap.add_argument("--hold", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--addr", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hold:
        hold(args.hold, args.port, args.addr)
        return 0

    # An installed dyncc carries byte code (pip compiles a wheel's modules at install time); a
    # development checkout under PYTHONDONTWRITEBYTECODE=1 would compile ~20 modules from source
    # on every start, ~25 ms of each `collect --once` here.
    subprocess.run(
        [PY, "-m", "compileall", "-q", "dyncc_common", "collector", "controller", "schemas"], cwd=REPO, check=True
    )
    ns = f"{args.ns_prefix}col-{uuid.uuid4().hex[:6]}"
    tmp = Path(tempfile.mkdtemp(prefix="dbench-col-"))
    holders: list[subprocess.Popen[str]] = []
    topic = ""
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        conns = args.conns // 2
        t0 = time.perf_counter()
        k = 0
        while conns > 0:
            n = min(args.per_proc, conns)
            cmd = [
                "ip",
                "netns",
                "exec",
                ns,
                PY,
                __file__,
                "--hold",
                str(n),
                "--port",
                str(20000 + k),
                "--addr",
                f"127.0.{k // 200}.{1 + k % 200}",
            ]
            holders.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
            conns -= n
            k += 1
        for h in holders:
            assert h.stdout is not None
            line = h.stdout.readline()
            if line.strip() != "ready":
                raise SystemExit(f"holder failed: {line!r}")
        total = count_sockets(ns)
        print(
            f"{total} established sockets in {ns} from {len(holders)} processes "
            f"({time.perf_counter() - t0:.1f}s to set up)"
        )

        topic = f"{args.topic_prefix}{uuid.uuid4().hex[:8]}"
        common = ["--once", "--no-default-excludes", "--host", "bench", "--pop", "lab"]
        if args.timeline:
            common.append("-v")
        moments: dict[str, dict[str, list[float]]] = {"collect file": {}, "collect kafka": {}}
        runs: dict[str, list[tuple[float, int, int, float]]] = {
            "ss -tin": [],
            "collect file": [],
            "collect kafka": [],
        }
        kafka_cmd = [DYNCC, "collect", *common, "--netns", ns, "--sink", "kafka", "--brokers", args.brokers]
        if not args.no_kafka:  # untimed: creates the topic and warms the broker and the page cache
            timed([*kafka_cmd, "--topic", topic])
        # untimed: counts what the raw dump receives (and warms the kernel's socket walk)
        _, _, datagrams, nbytes, messages = raw_dump(ns, count=True)
        print(f"raw dump: {messages} messages in {datagrams} datagrams, {nbytes / 1e6:.1f} MB")
        raw_alt: list[tuple[float, float]] = []
        for r in range(args.rounds):
            runs["ss -tin"].append(timed(["ip", "netns", "exec", ns, "ss", "-tin"]))
            raw_alt.append(raw_dump(ns)[:2])
            out = tmp / f"batches-{r}.bin"
            runs["collect file"].append(
                timed(
                    [DYNCC, "collect", *common, "--netns", ns, "--sink", "file", "--out", str(out)],
                    moments=moments["collect file"] if args.timeline else None,
                )
            )
            if r == 0:
                print(f"file sink wrote {out.stat().st_size / 1e6:.1f} MB for one poll")
            out.unlink(missing_ok=True)
            if not args.no_kafka:
                runs["collect kafka"].append(
                    timed([*kafka_cmd, "--topic", topic], moments=moments["collect kafka"] if args.timeline else None)
                )
        raw_idle: list[tuple[float, float]] = []
        steady = [] if args.no_kafka else daemon_polls(ns, args.brokers, topic, args.rounds, raw_idle)
        base = statistics.median(t for t, _, _, _ in runs["ss -tin"])
        raw_base = statistics.median(t for t, _ in raw_alt)
        raw_cpu = statistics.median(c for _, c in raw_alt)
        print(
            f"\n{'command':<22}{'median s':>9}{'best s':>8}{'sockets/s':>11}{'vs ss':>7}{'vs raw':>8}"
            f"{'CPU s':>7}{'CPU vs raw':>11}{'peak RSS MB':>12}  per run: vs ss, vs raw"
        )

        # speed ratio of each run to a reference: median [range] over the runs
        def spread(ref: float, times: list[float]) -> str:
            ratios = sorted(ref / t for t in times)
            return f"{statistics.median(ratios):.2f}x [{ratios[0]:.2f}-{ratios[-1]:.2f}]"

        def row(
            name: str, times: list[float], cpus: list[float], ref: float, ref_cpu: float, rss: str = "", note: str = ""
        ) -> None:
            med = statistics.median(times)
            cpu = statistics.median(cpus)
            print(
                f"{name:<22}{med:>9.3f}{min(times):>8.3f}{total / med:>11,.0f}{base / med:>6.2f}x"
                f"{ref / med:>7.2f}x{cpu:>7.3f}{ref_cpu / cpu if cpu else 0:>10.2f}x{rss:>12}"
                f"  {spread(base, times)}, {spread(ref, times)}{note}"
            )

        row("raw dump (recv only)", [t for t, _ in raw_alt], [c for _, c in raw_alt], raw_base, raw_cpu)
        for name, got in runs.items():
            if not got:
                continue
            fails = sum(1 for _, rc, _, _ in got if rc != 0)
            row(
                name,
                [t for t, _, _, _ in got],
                [c for _, _, _, c in got],
                raw_base,
                raw_cpu,
                f"{max(m for _, _, m, _ in got) / 1024:.1f}",
                f"  ({fails} failed)" if fails else "",
            )
        for name, got_moments in moments.items():
            if got_moments:
                print(
                    f"{name} timeline, median ms after the spawn (spans: ms spent): "
                    + " ".join(f"{k}={statistics.median(v):.1f}" for k, v in got_moments.items())
                )
        if steady:
            idle = raw_idle or raw_alt
            raw_poll = statistics.median(t for t, _ in idle)
            raw_poll_cpu = statistics.median(c for _, c in idle)
            if raw_idle:
                row("raw dump, poll idle", [t for t, _ in raw_idle], [c for _, c in raw_idle], raw_poll, raw_poll_cpu)
            row(
                "daemon poll",
                [t for t, _ in steady],
                [c for _, c in steady],
                raw_poll,
                raw_poll_cpu,
                note="  (steady state, Kafka sink; vs the raw dumps between polls; CPU per poll cycle)",
            )
            if raw_idle:
                paired = sorted(r / t for (r, _), (t, _) in zip(raw_idle, steady, strict=False))
                print(
                    f"daemon poll vs the raw dump right after it: {statistics.median(paired):.2f}x "
                    f"[{paired[0]:.2f}-{paired[-1]:.2f}]"
                )
        return 0
    finally:
        for h in holders:
            if h.stdin:
                h.stdin.close()
        for h in holders:
            try:
                h.wait(timeout=20)
            except subprocess.TimeoutExpired:
                h.kill()
                h.wait()
        subprocess.run(["ip", "netns", "del", ns], check=False)
        if topic and not args.no_kafka:
            _delete_topic(args.brokers, topic)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
