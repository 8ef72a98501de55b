"""Record NETLINK_SOCK_DIAG dumps of this machine's kernel, with the `ss` text of the same bytes.

Usage (root, from the repository root):

    .venv/bin/python -m tests.collector.netlink.testdata.record_netlink [--out tests/collector/netlink/testdata/netlink]

What it does, and undoes:
  * creates two network namespaces `dyf-<random>-a` / `-b` joined by a veth
    (192.0.2.1/24 + 2001:db8::1/64 on a, 192.0.2.2/24 + 2001:db8::2/64 on b),
    with ECN negotiated (net.ipv4.tcp_ecn=1 in both);
  * opens a handful of TCP connections in namespace a: over loopback
    (127.0.0.1, ::1) and over the veth to listeners in b, with cubic, bbr and
    reno set per socket (one with a socket filter, for non-zero optmem),
    exchanging a few kilobytes, and one stuffed against a receiver that
    never reads (zero window: notsent, unacked, rwnd_limited, probes);
  * takes three snapshots (connected, after the exchange with unread data
    left queued, after closing some: TIME-WAIT, FIN-WAIT-2 / CLOSE-WAIT);
    each is one IPv4 and one IPv6 SOCK_DIAG_BY_FAMILY dump of namespace a,
    made with dyncc's own request code, every state, extensions
    INFO | VEGASINFO | CONG | SKMEMINFO | MEMINFO;
  * renders the very bytes of each dump with iproute2's ss
    (`TCPDIAG_FILE=<replies> ss -tinmHOe`: ss decodes a file of netlink
    replies exactly like a live dump), so the text and the capture describe
    the same moment by construction;
  * writes `<kernel release>/<snapshot>.pcap` (LINKTYPE_NETLINK, requests
    and replies), `<snapshot>.ss.txt` and `meta.json`, then closes every
    socket and deletes both namespaces (on failure too).

Only loopback and documentation addresses are used; nothing leaves the
namespaces.  Exits 2 with a one-line reason when it cannot run (not root,
no `ss`, no `ip`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from collector.netlink.sockdiag import (
    DEFAULT_EXT,
    NETLINK_SOCK_DIAG,
    SOCK_DIAG_BY_FAMILY,
    TCP_STATES,
    build_request,
    open_diag_socket,
    state_mask,
    walk_messages,
)
from tests.support.netlink_pcap import PACKET_HOST, PACKET_OUTGOING, NetlinkPacket, write_pcap

EXT_MEMINFO = 1 << (1 - 1)
REQUEST_EXT = DEFAULT_EXT | EXT_MEMINFO
ALL_STATES = state_mask(list(TCP_STATES.values()))
SS_ARGS = ("-tinmHOe",)
TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)
SO_ATTACH_FILTER = 26
CHUNK = 8192
DEFAULT_OUT = Path(__file__).resolve().parent / "netlink"


def sh(*cmd: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: {proc.stderr.strip()}")
    return proc.stdout


@contextmanager
def namespaces(prefix: str) -> Iterator[tuple[str, str]]:
    """Namespaces `<prefix>-a` and `<prefix>-b` joined by a veth; deleted afterwards."""
    a, b = f"{prefix}-a", f"{prefix}-b"
    made: list[str] = []
    try:
        for ns in (a, b):
            sh("ip", "netns", "add", ns)
            made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.tcp_ecn=1")  # ecn / ecnseen flags
        sh("ip", "-n", a, "link", "add", "veth0", "type", "veth", "peer", "name", "veth0", "netns", b)
        for ns, host in ((a, 1), (b, 2)):
            sh("ip", "-n", ns, "addr", "add", f"192.0.2.{host}/24", "dev", "veth0")
            sh("ip", "-n", ns, "addr", "add", f"2001:db8::{host}/64", "dev", "veth0", "nodad")
            sh("ip", "-n", ns, "link", "set", "veth0", "up")
        yield a, b
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def ns_socket(ns: str, family: int) -> socket.socket:
    """A TCP socket created inside namespace `ns` (it keeps living there)."""
    from pyroute2 import netns as pr_netns

    sock: socket.socket = pr_netns.create_socket(ns, family, socket.SOCK_STREAM, 0, flags=0)
    return sock


def listener(stack: ExitStack, ns: str, family: int, addr: str, port: int, rcvbuf: int = 0) -> socket.socket:
    sock = stack.enter_context(ns_socket(ns, family))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if rcvbuf:  # inherited by the accepted sockets: a small receive window
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.bind((addr, port))
    sock.listen(16)
    return sock


def connect(
    stack: ExitStack, ns: str, family: int, server: socket.socket, addr: str, port: int, cc: str
) -> tuple[socket.socket, socket.socket]:
    """(client, accepted server side) of a new connection using congestion control `cc`."""
    client = stack.enter_context(ns_socket(ns, family))
    client.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, cc.encode())
    client.settimeout(10)
    client.connect((addr, port))
    conn, _ = server.accept()
    stack.enter_context(conn)
    conn.settimeout(10)
    return client, conn


def attach_accept_all_filter(sock: socket.socket) -> None:
    """SO_ATTACH_FILTER with a one-instruction "accept" program: the filter is charged to the
    socket's option memory, so skmem shows a non-zero o<optmem>."""
    import ctypes

    class SockFilter(ctypes.Structure):
        _fields_ = (("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32))

    class SockFprog(ctypes.Structure):
        _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter)))

    program = (SockFilter * 1)(SockFilter(0x06, 0, 0, 0xFFFFFFFF))  # BPF_RET | BPF_K: accept all
    fprog = SockFprog(1, ctypes.cast(program, ctypes.POINTER(SockFilter)))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, bytes(fprog))


def stuff(client: socket.socket) -> int:
    """Send until the peer's (small, unread) receive window and our send buffer are full."""
    client.setblocking(False)
    sent = 0
    try:
        while sent < 16 << 20:
            sent += client.send(bytes(65536))
    except BlockingIOError:
        pass
    client.settimeout(10)
    return sent


def recv_exactly(sock: socket.socket, n: int) -> None:
    while n:
        got = sock.recv(min(n, 65536))
        if not got:
            raise RuntimeError("connection closed early")
        n -= len(got)


def exchange(client: socket.socket, conn: socket.socket, rounds: int) -> None:
    """Ping-pong CHUNK bytes each way (single-threaded: each chunk fits the socket buffers)."""
    data = bytes(CHUNK)
    for _ in range(rounds):
        client.sendall(data)
        recv_exactly(conn, CHUNK)
        conn.sendall(data)
        recv_exactly(client, CHUNK)


def dump(ns: str) -> tuple[list[NetlinkPacket], list[float], bytes]:
    """IPv4 then IPv6 dump of `ns`: (pcap packets, their times, ss input file)."""
    packets: list[NetlinkPacket] = []
    stamps: list[float] = []
    messages: list[bytes] = []
    done_msg = b""
    sock = open_diag_socket(ns)
    try:
        sock.settimeout(10)
        for seq, family in enumerate((socket.AF_INET, socket.AF_INET6), start=1):
            req = build_request(family, ALL_STATES, REQUEST_EXT, seq)
            stamps.append(time.time())
            packets.append(NetlinkPacket(PACKET_OUTGOING, NETLINK_SOCK_DIAG, req, False))
            sock.sendall(req)
            while True:
                data = sock.recv(65536)
                stamps.append(time.time())
                packets.append(NetlinkPacket(PACKET_HOST, NETLINK_SOCK_DIAG, data, False))
                walk = walk_messages(data, 0, len(data))
                if walk.error:
                    raise RuntimeError(f"dump failed: error {walk.error}")
                for off, length in zip(walk.offsets, walk.lengths, strict=True):
                    messages.append(data[off : off + ((length + 3) & ~3)])
                if walk.done:
                    tail = data[-20:]
                    if int.from_bytes(tail[4:6], "little") != 3:
                        raise RuntimeError("NLMSG_DONE is not the last message of the datagram")
                    done_msg = tail
                    break
    finally:
        sock.close()
    types = {int.from_bytes(m[4:6], "little") for m in messages}
    if types - {SOCK_DIAG_BY_FAMILY}:
        raise RuntimeError(f"unexpected message types {types}")
    return packets, stamps, b"".join(messages) + done_msg


def render_ss(ss_input: bytes) -> str:
    """ss's text for a file of SOCK_DIAG replies ending with NLMSG_DONE."""
    with tempfile.NamedTemporaryFile(prefix="dyf-ss-", suffix=".bin") as tmp:
        tmp.write(ss_input)
        tmp.flush()
        env = dict(os.environ, TCPDIAG_FILE=tmp.name)
        proc = subprocess.run(["ss", *SS_ARGS], capture_output=True, text=True, env=env, timeout=30)
    if proc.returncode:
        raise RuntimeError(f"ss failed: {proc.stderr.strip()}")
    # ss pads -O lines to the terminal width; the padding carries no information
    return "".join(line.rstrip() + "\n" for line in proc.stdout.splitlines())


def record(out_dir: Path) -> Path:
    release = platform.release()
    target = out_dir / release
    target.mkdir(parents=True, exist_ok=True)
    snapshots: dict[str, dict[str, object]] = {}
    prefix = f"dyf-{uuid.uuid4().hex[:6]}"

    def snapshot(name: str, ns: str, note: str) -> None:
        packets, stamps, ss_input = dump(ns)
        (target / f"{name}.pcap").write_bytes(write_pcap(packets, stamps))
        text = render_ss(ss_input)
        (target / f"{name}.ss.txt").write_text(text)
        snapshots[name] = {"note": note, "sockets": len(text.splitlines()), "datagrams": len(packets) - 2}

    with namespaces(prefix) as (a, b), ExitStack() as stack:
        lo4 = listener(stack, a, socket.AF_INET, "127.0.0.1", 7000)
        lo6 = listener(stack, a, socket.AF_INET6, "::1", 7000)
        far4 = listener(stack, b, socket.AF_INET, "192.0.2.2", 8080)
        far6 = listener(stack, b, socket.AF_INET6, "2001:db8::2", 8080)
        narrow = listener(stack, b, socket.AF_INET, "192.0.2.2", 8081, rcvbuf=4096)
        pairs = [
            connect(stack, a, socket.AF_INET, lo4, "127.0.0.1", 7000, "cubic"),
            connect(stack, a, socket.AF_INET6, lo6, "::1", 7000, "bbr"),
            connect(stack, a, socket.AF_INET, far4, "192.0.2.2", 8080, "bbr"),
            connect(stack, a, socket.AF_INET6, far6, "2001:db8::2", 8080, "reno"),
        ]
        attach_accept_all_filter(pairs[1][0])
        stuffed = connect(stack, a, socket.AF_INET, narrow, "192.0.2.2", 8081, "cubic")
        stuffed[0].setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
        closing4 = connect(stack, a, socket.AF_INET, lo4, "127.0.0.1", 7000, "reno")
        closing6 = connect(stack, a, socket.AF_INET6, lo6, "::1", 7000, "cubic")
        snapshot("connected", a, "listeners and fresh connections, no data yet")
        for i, (client, conn) in enumerate([*pairs, closing4, closing6]):
            exchange(client, conn, rounds=2 + 3 * i)
        pairs[0][0].sendall(bytes(3000))  # left unread: Recv-Q and skmem r on the server side
        pairs[2][1].sendall(bytes(5000))  # the client in a leaves it unread
        stuff(stuffed[0])  # receiver never reads: zero window, unsent data, window-limited time
        time.sleep(0.5)  # long enough for zero-window probes
        snapshot("exchanged", a, "after a ping-pong exchange; some data left unread")
        closing4[0].close()  # active close: the client ends in TIME-WAIT
        closing4[1].close()
        closing6[0].shutdown(socket.SHUT_WR)  # half close: FIN-WAIT-2 / CLOSE-WAIT
        time.sleep(0.05)
        snapshot("closing", a, "one connection closed (TIME-WAIT), one half-closed (FIN-WAIT-2 / CLOSE-WAIT)")

    ss_version = subprocess.run(["ss", "-V"], capture_output=True, text=True, timeout=10).stdout.strip()
    meta = {
        "kernel": release,
        "ss": ss_version,
        "ss_command": f"TCPDIAG_FILE=<the replies of the snapshot> ss {' '.join(SS_ARGS)}",
        "request": {"ext": REQUEST_EXT, "states": ALL_STATES, "families": ["AF_INET", "AF_INET6"]},
        "namespace": "a (loopback 127.0.0.1 / ::1 and veth 192.0.2.1 / 2001:db8::1); peers in b",
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "snapshots": snapshots,
    }
    (target / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="folder for <kernel release>/ (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("record_netlink: needs root (network namespaces)", file=sys.stderr)
        return 2
    for tool in ("ip", "ss"):
        if shutil.which(tool) is None:
            print(f"record_netlink: `{tool}` (iproute2) is not installed", file=sys.stderr)
            return 2
    target = record(args.out)
    print(f"recorded {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
