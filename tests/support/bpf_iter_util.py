"""Long-lived transfers between two namespaces for the open-connection tests (tests/collector/agent/test_bpf_iter.py).

Run as a module in a namespace:

    python -m tests.support.bpf_iter_util serve            # edge: ports 8080 (dual-stack) and 8081 (IPv4 only)
    python -m tests.support.bpf_iter_util fetch SPEC...    # client: SPEC = src,dst,port,bytes

The server answers each request line "N\\n" of a connection with N bytes ("x"), until the client
closes.  The client opens every connection first (each from its own source address), prints
"ready" and the JSON list of its local ports, reads every response concurrently, and once all
are complete prints the JSON list of the byte counts it received (in SPEC order).  Then each
line "I,J,... N" on its stdin asks N more bytes on connections I, J, ... (answered the same way);
it closes its sockets when its stdin closes.  `ss_connections(ns)` reads `ss -tin` on the edge.
"""

from __future__ import annotations

import json
import re
import selectors
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass

from tests.support.netns_util import REPO, ns_sh

PORTS = (8080, 8081)
CHUNK = 1 << 16


def _serve(conn: socket.socket) -> None:
    block = b"x" * CHUNK
    with conn, conn.makefile("rb") as requests:
        for line in requests:  # until the client closes
            left = int(line)
            while left > 0:
                left -= conn.send(block[: min(left, CHUNK)])


def _listen(family: socket.AddressFamily, port: int) -> None:
    lst = socket.socket(family, socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        lst.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    lst.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
    lst.listen(1024)
    while True:
        conn, _ = lst.accept()
        threading.Thread(target=_serve, args=(conn,), daemon=True).start()


def serve() -> None:
    threading.Thread(target=_listen, args=(socket.AF_INET6, 8080), daemon=True).start()
    threading.Thread(target=_listen, args=(socket.AF_INET, 8081), daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()


def fetch(specs: list[str]) -> None:
    socks: list[socket.socket] = []
    sizes: list[int] = []
    for spec in specs:
        src, dst, port, size = spec.split(",")
        sock = socket.socket(socket.AF_INET6 if ":" in dst else socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((src, 0))
        sock.connect((dst, int(port)))
        sock.sendall(size.encode() + b"\n")
        socks.append(sock)
        sizes.append(int(size))
    print("ready", flush=True)
    print(json.dumps([s.getsockname()[1] for s in socks]), flush=True)
    print(json.dumps(_read(socks, dict(enumerate(sizes)))), flush=True)
    for line in sys.stdin:
        which, size = line.split()
        wanted = {int(i): int(size) for i in which.split(",")}
        for index, size_ in wanted.items():
            socks[index].sendall(f"{size_}\n".encode())
        print(json.dumps(_read(socks, wanted)), flush=True)
    for sock in socks:
        sock.close()


def _read(socks: list[socket.socket], sizes: dict[int, int]) -> list[int]:
    """Read `sizes[i]` bytes from each `socks[i]` concurrently; the counts read (0 for the others)."""
    got = [0] * len(socks)
    sel = selectors.DefaultSelector()
    for index, size in sizes.items():
        if size:
            sel.register(socks[index], selectors.EVENT_READ, index)
    while sel.get_map():
        for key, _ in sel.select():
            index = key.data
            chunk = socks[index].recv(min(CHUNK, sizes[index] - got[index]))
            got[index] += len(chunk)
            if not chunk or got[index] >= sizes[index]:
                sel.unregister(key.fileobj)
    return got


# ----------------------------------------------------------------- test side


class Fetch:
    """A running `fetch` client: its local ports, then (`results()`) the byte counts."""

    def __init__(self, ns: str, specs: list[tuple[str, str, int, int]]) -> None:
        args = [f"{src},{dst},{port},{size}" for src, dst, port, size in specs]
        self.specs = specs
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "tests.support.bpf_iter_util", "fetch", *args],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", f"client failed: {line!r}"
        self.ports: list[int] = json.loads(self.proc.stdout.readline())

    def peers(self) -> list[tuple[str, int]]:
        """(client address, client port) of each connection, as the edge sees its peers."""
        return [(src, port) for (src, _, _, _), port in zip(self.specs, self.ports, strict=True)]

    def results(self, timeout: float = 30) -> list[int]:
        """Bytes received per connection, once all are complete."""
        assert self.proc.stdout is not None
        done: list[str] = []
        reader = threading.Thread(target=lambda: done.append(self.proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout)
        assert done and done[0], "the transfers did not complete"
        return list(json.loads(done[0]))

    def more(self, indexes: list[int], size: int) -> None:
        """Ask `size` more bytes on connections `indexes` (then `results()` gives the counts)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{','.join(map(str, indexes))} {size}\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@dataclass(frozen=True)
class Conn:
    cc: str
    bytes_acked: int


_SS_HEAD = re.compile(r"^\S+\s+\d+\s+\d+\s+\S+:(\d+)\s+(\S+):(\d+)")


def ss_connections(ns: str) -> dict[tuple[str, int], Conn]:
    """`ss -Htin` on the edge's server sockets: (peer address, peer port) -> Conn (IPv4-mapped as IPv4)."""
    found: dict[tuple[str, int], Conn] = {}
    peer: tuple[str, int] | None = None
    for line in ns_sh(ns, "ss", "-Htina", "state", "connected").splitlines():
        if not line[:1].isspace():
            m = _SS_HEAD.match(line)
            peer = None
            if m and int(m.group(1)) in PORTS:
                peer = (m.group(2).strip("[]").removeprefix("::ffff:"), int(m.group(3)))
        elif peer is not None:
            fields = line.split()
            acked = next((int(f.split(":")[1]) for f in fields if f.startswith("bytes_acked:")), 0)
            found[peer] = Conn(fields[0], acked)
            peer = None
    return found


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve()
    else:
        fetch(sys.argv[2:])
