"""Continuous real TCP transfers for the lab: a server on the edge, a client per client host.

Protocol: the client sends an 8-byte big-endian byte count, the server answers
with that many bytes; a connection carries 2-6 such requests (the sizes a mix
below and above 100 KB), pauses between them, then closes and a new connection
starts.  The edge is the sender, so the collector in the edge namespace sees
the server sockets' delivery_rate, and new connections pick up the congestion
control of the edge's route to the client's prefix.

Run inside a namespace as a small process (stdlib only, starts fast):
    python -m dyncc.lab.traffic serve --port 8080
    python -m dyncc.lab.traffic client --server 192.0.2.1 --port 8080 --seed 3
bench/lab_paths.py starts them inside its namespaces.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import random
import signal
import socket
import socketserver
import struct
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass

log = logging.getLogger("dyncc.lab")

_REQ = struct.Struct(">Q")
MAX_REQUEST = 64 << 20
CHUNK = 256 << 10
# (bytes, weight): about half the connections stay below 100 KB in total
SIZES: tuple[tuple[int, int], ...] = ((20_000, 3), (60_000, 3), (300_000, 3), (1_000_000, 2))


def pick_size(rng: random.Random) -> int:
    sizes, weights = zip(*SIZES, strict=True)
    return rng.choices(sizes, weights)[0]


# ------------------------------------------------------------------ server


class _Handler(socketserver.BaseRequestHandler):
    payload = memoryview(b"\x5a" * CHUNK)

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(30)
        try:
            while True:
                head = _recv_exact(sock, _REQ.size)
                if head is None:
                    return
                (n,) = _REQ.unpack(head)
                if n > MAX_REQUEST:
                    return
                while n > 0:
                    k = min(n, CHUNK)
                    sock.sendall(self.payload[:k])
                    n -= k
        except OSError:
            return


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            return None
        buf += part
    return bytes(buf)


class _DualStackServer(socketserver.ThreadingTCPServer):
    address_family = socket.AF_INET6
    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 128

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def serve(port: int) -> int:
    server = _DualStackServer(("::", port), _Handler)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


# ------------------------------------------------------------------ client


@dataclass
class ClientStats:
    connections: int = 0
    requests: int = 0
    bytes: int = 0
    errors: int = 0


def client_loop(server: str, port: int, seed: int, stop: threading.Event, stats: ClientStats) -> None:
    rng = random.Random(seed)
    family = socket.AF_INET6 if ":" in server else socket.AF_INET
    while not stop.is_set():
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.settimeout(20)
                sock.connect((server, port))
                stats.connections += 1
                for _ in range(rng.randint(2, 6)):
                    n = pick_size(rng)
                    sock.sendall(_REQ.pack(n))
                    left = n
                    while left > 0:
                        got = sock.recv(min(left, CHUNK))
                        if not got:
                            raise ConnectionError("server closed the connection")
                        left -= len(got)
                    stats.requests += 1
                    stats.bytes += n
                    if stop.wait(rng.uniform(0.2, 0.8)):
                        break
        except OSError:
            stats.errors += 1
            stop.wait(0.5)
        stop.wait(rng.uniform(0.0, 0.2))


def client(server: str, port: int, seed: int) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stats = ClientStats()
    with contextlib.suppress(KeyboardInterrupt):
        client_loop(server, port, seed, stop, stats)
    print(
        f"client {server}: {stats.connections} connections, {stats.requests} requests, "
        f"{stats.bytes} bytes, {stats.errors} errors",
        file=sys.stderr,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dyncc.lab.traffic")
    sub = parser.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, default=8080)
    c = sub.add_parser("client")
    c.add_argument("--server", required=True)
    c.add_argument("--port", type=int, default=8080)
    c.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.mode == "serve":
        return serve(args.port)
    return client(args.server, args.port, args.seed)


if __name__ == "__main__":
    sys.exit(main())
