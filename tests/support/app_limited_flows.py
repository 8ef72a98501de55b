"""Traffic for the app-limited namespace test (run inside a namespace).

    python -m tests.support.app_limited_flows serve KIND,ADDR,PORT...   KIND slow | bulk
    python -m tests.support.app_limited_flows connect ADDR,PORT...

`serve` listens on each ADDR,PORT, accepts one connection and writes to it: `slow` writes
SLOW_CHUNK bytes every SLOW_PERIOD seconds (the server has no more to send: the kernel marks
its rate samples app-limited), `bulk` writes as fast as the path takes.  `connect` opens one
connection to each and reads everything.  Both print "ready" (serve: listening; connect:
connected) and run until stdin closes.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

SLOW_CHUNK = 20_000
SLOW_PERIOD = 0.05
BULK_CHUNK = 1 << 16


def _split(spec: str) -> tuple[str, int]:
    addr, port = spec.rsplit(",", 1)
    return addr, int(port)


def _family(addr: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def _write(listener: socket.socket, kind: str) -> None:
    conn, _ = listener.accept()
    chunk = b"s" * (SLOW_CHUNK if kind == "slow" else BULK_CHUNK)
    try:
        while True:
            conn.sendall(chunk)
            if kind == "slow":
                time.sleep(SLOW_PERIOD)
    except OSError:
        return


def _read(addr: str, port: int) -> socket.socket:
    conn = socket.create_connection((addr, port), timeout=10)
    conn.settimeout(None)

    def drain() -> None:
        try:
            while conn.recv(1 << 18):
                pass
        except OSError:
            return

    threading.Thread(target=drain, daemon=True).start()
    return conn


def main(argv: list[str]) -> None:
    command, specs = argv[0], argv[1:]
    held: list[socket.socket] = []
    if command == "serve":
        for spec in specs:
            kind, rest = spec.split(",", 1)
            addr, port = _split(rest)
            listener = socket.socket(_family(addr), socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((addr, port))
            listener.listen(1)
            held.append(listener)
            threading.Thread(target=_write, args=(listener, kind), daemon=True).start()
    elif command == "connect":
        held.extend(_read(*_split(spec)) for spec in specs)
    else:
        raise SystemExit(f"unknown command {command!r}")
    print("ready", flush=True)
    sys.stdin.read()
    os._exit(0)  # the writer threads may sit in sendall


if __name__ == "__main__":
    main(sys.argv[1:])
