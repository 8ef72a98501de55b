"""recvmmsg receiving (collector.netlink.recvmmsg) and the dump reader built on it.

MultiRecv on a datagram socketpair: slots, lengths, truncation at the stride,
bounds, errors.  DiagDumper with recvmmsg against the same dumper with one
recv_into per datagram, on loopback connections of this test's own namespace,
with chunks small enough that a dump spans many of them.
"""

from __future__ import annotations

import errno
import mmap
import socket
from collections.abc import Iterator

import numpy as np
import pytest

from collector.netlink.recvmmsg import MultiRecv
from collector.netlink.sockdiag import RECV_SIZE, TCP_STATES, open_diag_socket, state_mask
from collector.netlink.sockdiag_dump import DiagDumper
from collector.netlink.sockdiag_parse import ErrorCounts, Parsed

pytestmark = pytest.mark.skipif(not MultiRecv.available(), reason="no recvmmsg in this libc")


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_datagrams_land_in_stride_slots(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    sent = [bytes([k + 1]) * size for k, size in enumerate((10, 1024, 1, 700, 300))]
    for d in sent:
        a.send(d)
    buf = mmap.mmap(-1, 64 * 1024)
    got = MultiRecv(b, 16).recv(buf, 4096, 16, 1024)
    assert got == [len(d) for d in sent]  # only what was queued: it waits for the first one only
    for i, d in enumerate(sent):
        assert buf[4096 + i * 1024 : 4096 + i * 1024 + len(d)] == d


def test_count_limits_and_long_datagrams_are_cut(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    for d in (b"a" * 100, b"b" * 3000, b"c" * 5):
        a.send(d)
    buf = bytearray(8192)
    multi = MultiRecv(b, 2)
    assert multi.recv(buf, 0, 5, 2048) == [100, 2048]  # the limit is 2; the second is cut to the stride
    assert buf[2048:4096] == b"b" * 2048
    assert multi.recv(buf, 0, 2, 2048) == [5]  # the rest of the cut datagram is gone, as with recv_into
    assert buf[:5] == b"c" * 5


def test_slots_outside_the_buffer_are_refused(pair: tuple[socket.socket, socket.socket]) -> None:
    _, b = pair
    multi = MultiRecv(b, 4)
    with pytest.raises(ValueError):
        multi.recv(bytearray(4096), 1024, 4, 1024)
    with pytest.raises(ValueError):
        multi.recv(bytearray(4096), 0, 0, 1024)


def test_errors_are_oserrors(pair: tuple[socket.socket, socket.socket]) -> None:
    _, b = pair
    b.setblocking(False)
    with pytest.raises(OSError) as exc:
        MultiRecv(b, 4).recv(bytearray(4096), 0, 4, 1024)
    assert exc.value.errno in (errno.EAGAIN, errno.EWOULDBLOCK)


@pytest.fixture
def connections() -> Iterator[set[int]]:
    """~300 established loopback connections of this process; yields their local ports."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(512)
    port = lst.getsockname()[1]
    held: list[socket.socket] = [lst]
    try:
        for _ in range(300):
            c = socket.create_connection(("127.0.0.1", port))
            s, _ = lst.accept()
            held += [c, s]
        yield {port} | {c.getsockname()[1] for c in held[1::2]}
    finally:
        for s in held:
            s.close()


def dump_ours(multi: bool, ports: set[int]) -> tuple[list[tuple[int, int, int]], int, int]:
    """(sorted (cookie, sport, dport) of our sockets, chunks, datagrams) of one AF_INET dump."""
    dumper = DiagDumper(open_diag_socket(), chunk_bytes=2 * RECV_SIZE, multi=multi)
    chunks: list[Parsed] = []
    try:
        res = dumper.dump(socket.AF_INET, state_mask([TCP_STATES["established"]]), chunks.append, ErrorCounts())
    finally:
        dumper.close()
    rows: list[tuple[int, int, int]] = []
    for p in chunks:
        c = p.columns
        mine = np.isin(c["src_port"], list(ports)) & np.isin(c["dst_port"], list(ports))
        rows += zip(c["cookie"][mine].tolist(), c["src_port"][mine].tolist(), c["dst_port"][mine].tolist(), strict=True)
    return sorted(rows), len(chunks), res.datagrams


def test_recvmmsg_dump_equals_recv_into_dump(connections: set[int]) -> None:
    multi, chunks, datagrams = dump_ours(True, connections)
    single, _, _ = dump_ours(False, connections)
    assert len(multi) == 600  # both ends of every connection
    assert multi == single
    assert chunks >= 2 and datagrams >= chunks  # the dump spanned several chunks
