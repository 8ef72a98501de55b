"""The lab's clients: real HTTP/1.1 GETs from many source addresses to the edges of their POP.

One process per client namespace (stdlib only, so it starts fast):
    python -m dyncc.lab.http_load --port 80 --think 3 \\
        --client 2001:db8:101:300::2=2001:db8:ff00::2,2001:db8:ff00:1::2 --client ...
    (or --clients FILE.json: {"clients": [{"addr": "...", "edges": ["...", ...]}, ...]})
Each virtual client is bound to its own source address (which must be on an interface of the
namespace) and loops: think (exponential, mean --think), pick one of its edges at random (the
POP's load balancer), connect, make 1 to --keepalive GETs on that connection (an object drawn
by the catalogue's weights, of at least --min-size bytes, the whole body read; a think time
before each later request too),
close.  At most --max-active transfers run at once per process (the others wait), so the rate
is bounded by the clients, the think time and that cap.  SIGTERM (or --duration) stops it
within about a second; one stats line (`http_load key=value ...`) goes to stderr on exit.

The clients are asyncio tasks on one event loop, each connection a small HTTP/1.1 protocol
(`_Conn`, `parse_head`: nginx's static responses always carry a Content-Length): a thread per
client spent most of its CPU handing the GIL around, one wake-up per received packet.
`HttpLoad` starts and stops such processes for the lab, each inside its namespace.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO

from dyncc.lab.topology import WEB_PORT
from dyncc.lab.web import COPIES, WebObject, catalogue, cpu_seconds

DEFAULT_THINK = 3.0  # seconds, mean of the exponential think time
DEFAULT_KEEPALIVE = 4  # requests per connection: uniform 1..this
DEFAULT_MAX_ACTIVE = 24  # concurrent transfers per process
DEFAULT_TIMEOUT = 20.0  # seconds without progress on a socket
STOP_GRACE = 0.5  # seconds the cancelled clients get to close their connections
READ_BUFFER = 256 << 10  # the most one read takes
MAX_HEAD = 16 << 10  # bytes of a response head
RCV_LOWAT = 16 << 10  # wake up for this many body bytes (far below the receive window)
USER_AGENT = "dyncc-lab-http-load"


@dataclass(frozen=True)
class VirtualClient:
    addr: str  # source address (a client prefix's address)
    edges: tuple[str, ...]  # the addresses of its POP's edges, in its family

    @classmethod
    def parse(cls, text: str) -> VirtualClient:
        """`ADDR=EDGE[,EDGE...]`."""
        addr, sep, edges = text.partition("=")
        parts = tuple(e.strip() for e in edges.split(",") if e.strip())
        if not sep or not addr.strip() or not parts:
            raise ValueError(f"bad client {text!r}: want ADDR=EDGE[,EDGE...]")
        return cls(addr.strip(), parts)

    def arg(self) -> str:
        return f"{self.addr}={','.join(self.edges)}"


def read_clients(path: Path) -> list[VirtualClient]:
    data = json.loads(path.read_text())
    return [VirtualClient(str(c["addr"]), tuple(str(e) for e in c["edges"])) for c in data["clients"]]


@dataclass
class Stats:
    """Counters of one virtual client, summed over all of them at the end."""

    connections: int = 0
    requests: int = 0  # responses read completely
    ok: int = 0  # ... of which status 200 with the catalogue's size
    bytes: int = 0  # body bytes read
    errors: int = 0  # connections that failed (connect, reset, timeout, bad response)
    timeouts: int = 0  # ... of which timeouts
    bad: int = 0  # responses that were not 200 or not of the expected size

    def add(self, other: Stats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass
class LoadConfig:
    port: int = WEB_PORT
    think: float = DEFAULT_THINK
    keepalive: int = DEFAULT_KEEPALIVE
    max_active: int = DEFAULT_MAX_ACTIVE
    timeout: float = DEFAULT_TIMEOUT
    copies: int = COPIES
    min_size: int = 0  # only the catalogue's objects of at least this many bytes (0: all)


def objects_of(cfg: LoadConfig) -> list[WebObject]:
    """The objects the clients of `cfg` ask for: the catalogue, or its objects of >= cfg.min_size bytes."""
    objects = [o for o in catalogue(cfg.copies) if o.size >= cfg.min_size]
    if not objects:
        raise ValueError(f"no object of the catalogue has {cfg.min_size} bytes or more")
    return objects


def parse_head(head: bytes) -> tuple[int, int, bool]:
    """(status, Content-Length, keep-alive) of an HTTP/1.x response head (the bytes before the
    blank line); ValueError when it is not one or has no Content-Length (nginx always sends one
    for a static file)."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0") or not parts[1].isdigit():
        raise ValueError(f"bad status line {lines[0][:80]!r}")
    length: int | None = None
    connection = b""
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise ValueError(f"bad header line {line[:80]!r}")
        key = name.strip().lower()
        if key == b"content-length":
            if not value.strip().isdigit():
                raise ValueError(f"bad Content-Length {value[:40]!r}")
            length = int(value)
        elif key == b"connection":
            connection = value.strip().lower()
    if length is None:
        raise ValueError("no Content-Length")
    tokens = {t.strip() for t in connection.split(b",")}
    keep_alive = b"close" not in tokens if parts[0] == b"HTTP/1.1" else b"keep-alive" in tokens
    return int(parts[1]), length, keep_alive


class _Conn(asyncio.BufferedProtocol):
    """One client connection: sends a GET, parses the response head, counts the body bytes.

    The body is received into one buffer shared by every connection of the process (it is
    never looked at), so a read costs no allocation and no copy.  While a body arrives, the
    socket's SO_RCVLOWAT is RCV_LOWAT (capped to the bytes still due, so the end is never
    held back): a slow transfer then wakes the process once per 16 KB instead of once per
    packet.  The kernel's ACKs do not wait for the reader, and 16 KB is far below the receive
    buffer, so the sender is not held back by it."""

    def __init__(self, buf: memoryview) -> None:
        self._buf = buf
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.progress = 0  # bytes received so far (the idle timeout watches it)
        self._head = bytearray()
        self._in_head = False
        self._left = 0
        self.status = 0
        self.body = 0
        self.keep_alive = False
        self._done: asyncio.Future[None] | None = None
        self._lowat = 1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def _set_lowat(self, n: int) -> None:
        n = max(1, min(RCV_LOWAT, n))
        if n != self._lowat and self.transport is not None:
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):  # a socket being closed: the read path reports it
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, n)
                    self._lowat = n

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buf

    def buffer_updated(self, nbytes: int) -> None:
        self.progress += nbytes
        if self._done is None or self._done.done():
            self._fail(ConnectionError("data outside a response"))
            return
        if self._in_head:
            self._head += self._buf[:nbytes]
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > MAX_HEAD:
                    self._fail(ValueError("response head too long"))
                return
            try:
                self.status, length, self.keep_alive = parse_head(bytes(self._head[:end]))
            except ValueError as exc:
                self._fail(exc)
                return
            self._in_head = False
            self.body = len(self._head) - end - 4
            self._left = length - self.body
        else:
            self.body += nbytes
            self._left -= nbytes
        if self._left < 0:
            self._fail(ValueError("more bytes than Content-Length"))
        elif self._left == 0:
            self._set_lowat(1)  # the next response's head
            self._done.set_result(None)
        elif self._left < self._lowat or (self._lowat == 1 and self._left > 1):
            self._set_lowat(self._left)

    def eof_received(self) -> bool:
        self.closed = True
        self._fail(ConnectionError("closed by the server"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(exc or ConnectionError("connection lost"))

    def _fail(self, exc: BaseException) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()

    async def get(self, host: str, uri: str, timeout: float) -> None:
        """One GET; returns once the whole body is in; TimeoutError after `timeout` seconds
        without a byte."""
        assert self.transport is not None
        self._done = asyncio.get_running_loop().create_future()
        self._head.clear()
        self._in_head, self.body, self.status = True, 0, 0
        host_header = f"[{host}]" if ":" in host else host
        self.transport.write(
            f"GET {uri} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: {USER_AGENT}\r\n\r\n".encode("ascii")
        )
        while True:
            before = self.progress
            try:
                await asyncio.wait_for(asyncio.shield(self._done), timeout)
                return
            except TimeoutError:
                if self.progress == before:
                    raise


def _same(conn: _Conn) -> _Conn:
    return conn


async def run_client(
    vc: VirtualClient,
    cfg: LoadConfig,
    objects: Sequence[WebObject],
    gate: asyncio.Semaphore,
    rng: random.Random,
    stats: Stats,
    buf: memoryview,
) -> None:
    """One virtual client until cancelled: connections of 1..keepalive requests, think times between."""
    loop = asyncio.get_running_loop()
    cum = list(itertools.accumulate(o.weight for o in objects))
    rate = 1.0 / cfg.think if cfg.think > 0 else 0.0

    def think() -> float:
        return rng.expovariate(rate) if rate else 0.0

    await asyncio.sleep(rng.uniform(0.0, cfg.think))  # spread the starts
    while True:
        edge = rng.choice(vc.edges)
        conn = _Conn(buf)
        try:
            connect = loop.create_connection(functools.partial(_same, conn), edge, cfg.port, local_addr=(vc.addr, 0))
            await asyncio.wait_for(connect, cfg.timeout)
            stats.connections += 1
            for i in range(rng.randint(1, cfg.keepalive)):
                if i:
                    await asyncio.sleep(think())
                if conn.closed:  # the server closed the idle connection: not an error
                    break
                obj = rng.choices(objects, cum_weights=cum)[0]
                async with gate:
                    await conn.get(edge, obj.uri, cfg.timeout)
                stats.requests += 1
                stats.bytes += conn.body
                if conn.status == 200 and conn.body == obj.size:
                    stats.ok += 1
                else:
                    stats.bad += 1
                if not conn.keep_alive:
                    break
        except (OSError, ValueError) as exc:  # TimeoutError and ConnectionError are OSErrors
            stats.errors += 1
            stats.timeouts += isinstance(exc, TimeoutError)
            await asyncio.sleep(0.5)  # a failing edge is not hammered
        finally:
            if conn.transport is not None:
                conn.transport.abort()
        await asyncio.sleep(think())


async def run_async(
    clients: Sequence[VirtualClient], cfg: LoadConfig, seed: int, duration: float = 0.0
) -> tuple[Stats, float]:
    """Every virtual client as a task until SIGTERM/SIGINT (or duration); (summed stats, seconds)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    objects = objects_of(cfg)
    gate = asyncio.Semaphore(cfg.max_active)
    buf = memoryview(bytearray(READ_BUFFER))
    per_client = [Stats() for _ in clients]
    start = time.monotonic()
    tasks = [
        asyncio.create_task(
            run_client(vc, cfg, objects, gate, random.Random(f"{seed}/{i}/{vc.addr}"), per_client[i], buf)
        )
        for i, vc in enumerate(clients)
    ]
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), duration if duration > 0 else None)
    elapsed = time.monotonic() - start
    for t in tasks:
        t.cancel()
    await asyncio.wait(tasks, timeout=STOP_GRACE)
    total = Stats()
    for s in per_client:
        total.add(s)
    return total, elapsed


def run(clients: Sequence[VirtualClient], cfg: LoadConfig, seed: int, duration: float = 0.0) -> tuple[Stats, float]:
    return asyncio.run(run_async(clients, cfg, seed, duration))


def stats_line(name: str, n_clients: int, stats: Stats, elapsed: float, cpu: float) -> str:
    secs = max(elapsed, 1e-9)
    return (
        f"http_load name={name} clients={n_clients} seconds={elapsed:.1f} connections={stats.connections} "
        f"requests={stats.requests} ok={stats.ok} bad={stats.bad} errors={stats.errors} "
        f"timeouts={stats.timeouts} bytes={stats.bytes} req_per_s={stats.requests / secs:.2f} "
        f"mbit_per_s={stats.bytes * 8 / secs / 1e6:.2f} cpu_s={cpu:.2f}"
    )


def parse_stats_line(line: str) -> dict[str, str]:
    """The key=value fields of a stats line (empty when it is not one)."""
    words = line.split()
    if not words or words[0] != "http_load":
        return {}
    return dict(w.split("=", 1) for w in words[1:] if "=" in w)


# ------------------------------------------------------------------ processes (lab side)


@dataclass
class HttpLoad:
    """Load processes of one lab, one per client namespace, each started inside it.

    With log_dir, each process's stderr (its stats line) goes to log_dir/http_load-<name>.log,
    and stats() reads the lines back after stop()."""

    cfg: LoadConfig = field(default_factory=LoadConfig)
    log_dir: Path | None = None
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(
        self,
        ns: str,
        clients: Sequence[VirtualClient],
        seed: int = 0,
        name: str | None = None,
        cfg: LoadConfig | None = None,
    ) -> None:
        """One load process in `ns` for `clients` (`cfg`: this process's config, default the load's)."""
        name = name or ns
        if name in self.procs:
            raise ValueError(f"load {name!r} already started")
        if not clients:
            raise ValueError(f"load {name!r} has no clients")
        c = cfg or self.cfg
        args = [
            *("--name", name, "--seed", str(seed), "--port", str(c.port), "--think", str(c.think)),
            *("--keepalive", str(c.keepalive), "--max-active", str(c.max_active)),
            *("--timeout", str(c.timeout), "--copies", str(c.copies), "--min-size", str(c.min_size)),
            *(a for vc in clients for a in ("--client", vc.arg())),
        ]
        cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "dyncc.lab.http_load", *args]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        err: IO[bytes] | int = subprocess.DEVNULL
        with contextlib.ExitStack() as stack:
            if self.log_dir is not None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                err = stack.enter_context(open(self.log_path(name), "wb"))
            self.procs[name] = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
                env=env,
            )

    def log_path(self, name: str) -> Path:
        if self.log_dir is None:
            raise ValueError("no log_dir")
        return self.log_dir / f"http_load-{name}.log"

    def exited(self) -> int:
        """How many of the processes have ended (they should run until stop())."""
        return sum(1 for p in self.procs.values() if p.poll() is not None)

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs.items() if p.poll() is None}

    def cpu_seconds(self) -> float:
        """CPU seconds of the running load processes so far."""
        return sum(cpu_seconds(pid) for pid in self.pids().values())

    def stop(self, timeout: float = 3.0) -> None:
        """SIGTERM each process, SIGKILL its group after the timeout: none is left."""
        procs = list(self.procs.values())
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                p.wait(max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(2)
        self.procs.clear()

    def stats(self) -> dict[str, dict[str, str]]:
        """name -> the last stats line's fields, for each log in log_dir (after stop())."""
        found: dict[str, dict[str, str]] = {}
        if self.log_dir is None:
            return found
        for path in sorted(self.log_dir.glob("http_load-*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if parsed := parse_stats_line(line):
                    found[parsed.get("name", path.stem)] = parsed
        return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dyncc.lab.http_load", description=__doc__.split("\n")[0])
    parser.add_argument("--client", action="append", default=[], help="ADDR=EDGE[,EDGE...] (repeat)")
    parser.add_argument("--clients", type=Path, help='JSON: {"clients": [{"addr": A, "edges": [E, ...]}]}')
    parser.add_argument("--port", type=int, default=WEB_PORT)
    parser.add_argument("--think", type=float, default=DEFAULT_THINK, help="mean think time, seconds")
    parser.add_argument("--keepalive", type=int, default=DEFAULT_KEEPALIVE, help="max requests per connection")
    parser.add_argument("--max-active", type=int, default=DEFAULT_MAX_ACTIVE, help="concurrent transfers")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="socket timeout, seconds")
    parser.add_argument("--copies", type=int, default=COPIES, help="files per size (as the edges serve)")
    parser.add_argument("--min-size", type=int, default=0, help="ask only for objects of at least this many bytes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (0: SIGTERM)")
    parser.add_argument("--name", default="load")
    args = parser.parse_args(argv)
    try:
        clients = [VirtualClient.parse(c) for c in args.client]
        if args.clients:
            clients += read_clients(args.clients)
    except (ValueError, KeyError, TypeError, OSError) as exc:
        parser.error(str(exc))
    if not clients:
        parser.error("no clients: give --client or --clients")
    if args.think < 0 or args.keepalive < 1 or args.max_active < 1 or args.timeout <= 0:
        parser.error("--think >= 0, --keepalive >= 1, --max-active >= 1, --timeout > 0")
    cfg = LoadConfig(args.port, args.think, args.keepalive, args.max_active, args.timeout, args.copies, args.min_size)
    try:
        objects_of(cfg)
    except ValueError as exc:
        parser.error(str(exc))
    stats, elapsed = run(clients, cfg, args.seed, args.duration)
    times = os.times()
    print(stats_line(args.name, len(clients), stats, elapsed, times.user + times.system), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
