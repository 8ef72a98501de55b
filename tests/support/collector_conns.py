"""Test traffic for the collector's namespace tests (run inside a namespace).

    python -m tests.support.collector_conns serve PORT...          listen on [::] / 0.0.0.0, reply to each client
    python -m tests.support.collector_conns connect ADDR,PORT,N... open N connections to each, exchange data

Both print "ready" once their connections are idle and then hold them until
stdin closes.
"""

from __future__ import annotations

import selectors
import socket
import sys
import threading

REQUEST = 20_000
REPLY = 60_000


def serve(ports: list[int]) -> None:
    sel = selectors.DefaultSelector()
    listeners = []
    for port in ports:
        for fam, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if fam == socket.AF_INET6:
                # port 8443 is dual-stack (IPv4 clients appear as ::ffff:a.b.c.d); others v6-only
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if port == 8443 else 1)
            if fam == socket.AF_INET and port == 8443:
                s.close()
                continue
            s.bind((addr, port))
            s.listen(1024)
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
            listeners.append(s)
    held: list[socket.socket] = []
    print("ready", flush=True)

    def close_on_eof() -> None:
        sys.stdin.read()
        sel.close()

    threading.Thread(target=close_on_eof, daemon=True).start()
    reply = b"r" * REPLY
    while True:
        try:
            events = sel.select(timeout=0.5)
        except (OSError, ValueError):
            return
        for key, _ in events:
            lst = key.fileobj
            assert isinstance(lst, socket.socket)
            try:
                conn, _ = lst.accept()
            except BlockingIOError:
                continue
            conn.setblocking(True)
            conn.sendall(reply)
            held.append(conn)


def connect(specs: list[str]) -> None:
    held: list[socket.socket] = []
    request = b"q" * REQUEST
    for spec in specs:
        addr, port, count = spec.rsplit(",", 2)
        fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
        for _ in range(int(count)):
            c = socket.socket(fam, socket.SOCK_STREAM)
            c.connect((addr, int(port)))
            c.sendall(request)
            got = 0
            while got < REPLY:
                chunk = c.recv(65536)
                if not chunk:
                    raise SystemExit(f"server closed {spec}")
                got += len(chunk)
            held.append(c)
    print("ready", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve([int(p) for p in sys.argv[2:]])
    else:
        connect(sys.argv[2:])
