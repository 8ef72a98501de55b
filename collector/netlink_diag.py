"""NETLINK_SOCK_DIAG dump I/O: one raw AF_NETLINK socket, SOCK_DIAG_BY_FAMILY dumps.

The dump is received straight into chunk buffers: netlink datagrams are
4-aligned streams of whole messages, so consecutive recv_into() calls leave one
contiguous run of messages that diag_parse can decode in a single vectorized
pass once the chunk is full (parsing copies everything out, so the buffer is
reused).  Buffers come from a BufferPool: anonymous mmaps made on first use
(no up-front zeroing; untouched pages cost no memory) and kept for later dumps.
Memory stays bounded by the pool whatever the number of sockets.

Namespaces: the socket is created inside the named namespace (setns on this
thread, then back), and keeps dumping that namespace afterwards.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import queue
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from collector.diag_parse import (
    PAD,
    SOCK_DIAG_BY_FAMILY,
    ErrorCounts,
    Parsed,
    may_end_dump,
    parse_messages,
    walk_datagrams,
    walk_messages,
)

NETLINK_SOCK_DIAG = 4
NLM_F_REQUEST = 0x01
NLM_F_DUMP = 0x300
IPPROTO_TCP = 6

# idiag_ext bits: 1 << (INET_DIAG_x - 1)
EXT_INFO = 1 << (2 - 1)
EXT_VEGASINFO = 1 << (3 - 1)  # also makes the kernel send INET_DIAG_BBRINFO for bbr sockets
EXT_CONG = 1 << (4 - 1)
EXT_SKMEMINFO = 1 << (7 - 1)
DEFAULT_EXT = EXT_INFO | EXT_VEGASINFO | EXT_CONG | EXT_SKMEMINFO

TCP_STATES = {
    "established": 1, "syn-sent": 2, "syn-recv": 3, "fin-wait-1": 4, "fin-wait-2": 5,
    "time-wait": 6, "close": 7, "close-wait": 8, "last-ack": 9, "listen": 10, "closing": 11,
    "new-syn-recv": 12,
}  # fmt: skip
STATE_NAMES = {v: k for k, v in TCP_STATES.items()}
#: Connected states except LISTEN, TIME_WAIT and SYN_RECV.
DEFAULT_STATES = ("established", "syn-sent", "fin-wait-1", "fin-wait-2", "close-wait", "last-ack", "closing")

RECV_SIZE = 64 * 1024
DEFAULT_CHUNK = 8 * 1024 * 1024
RCVBUF = 4 * 1024 * 1024

_REQ = struct.Struct("=IHHII BBBB I HH16s16sI8s")


class DumpError(Exception):
    """The dump could not be done (netlink error, namespace missing, timeout)."""


class DumpTimeout(DumpError):
    """The per-poll deadline passed during the dump."""


def state_mask(states: tuple[int, ...] | list[int] | frozenset[int]) -> int:
    mask = 0
    for s in states:
        mask |= 1 << s
    return mask


def build_request(family: int, states: int, ext: int, seq: int) -> bytes:
    """nlmsghdr + inet_diag_req_v2 asking for a dump of all TCP sockets of a family."""
    return _REQ.pack(
        _REQ.size, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0,
        family, IPPROTO_TCP, ext & 0xFF, 0, states & 0xFFFFFFFF,
        0, 0, bytes(16), bytes(16), 0, b"\xff" * 8,
    )  # fmt: skip


def open_diag_socket(netns: str | None = None) -> socket.socket:
    """A bound NETLINK_SOCK_DIAG socket, created inside `netns` when given."""
    if not netns:
        return _open()
    path = netns if "/" in netns else f"/var/run/netns/{netns}"
    if not os.path.exists(path):
        raise DumpError(f"network namespace {netns!r} does not exist ({path})")
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        try:
            target = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise DumpError(f"cannot open network namespace {netns!r}: {exc.strerror}") from exc
        try:
            _setns(target)
        except OSError as exc:
            raise DumpError(f"cannot enter network namespace {netns!r}: {exc.strerror}") from exc
        finally:
            os.close(target)
        try:
            return _open()
        finally:
            _setns(own)
    finally:
        os.close(own)


_CLONE_NEWNET = 0x40000000
_libc: ctypes.CDLL | None = None


def _setns(fd: int) -> None:
    """setns(2) for this thread (os.setns arrives in Python 3.12)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _open() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG)
    try:
        try:
            sock.setsockopt(socket.SOL_SOCKET, 33, RCVBUF)  # SO_RCVBUFFORCE (root)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        sock.bind((0, 0))
    except OSError:
        sock.close()
        raise
    return sock


@dataclass
class DumpResult:
    messages: int = 0
    datagrams: int = 0
    bytes: int = 0
    interrupted: bool = False


def chunk_buffer_size(chunk_bytes: int) -> int:
    """Bytes of a chunk buffer: the chunk, one more datagram, and the parser's zero padding."""
    return max(chunk_bytes, RECV_SIZE) + RECV_SIZE + PAD


class _Stopped(Exception):
    """The dump was abandoned while the reader waited for a buffer."""


class BufferPool:
    """At most `limit` chunk buffers of `size` bytes, made on first use, reused across dumps."""

    def __init__(self, size: int, limit: int = 3) -> None:
        self.size = size
        self.limit = max(limit, 2)
        self._free: queue.Queue[mmap.mmap] = queue.Queue()
        self._made = 0
        self._lock = threading.Lock()

    def get(self, stop: threading.Event | None = None) -> mmap.mmap:
        """A free buffer; waits for one when `limit` exist (raises _Stopped once `stop` is set)."""
        try:
            return self._free.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if self._made < self.limit:
                self._made += 1
                return mmap.mmap(-1, self.size)
        while True:
            try:
                return self._free.get(timeout=0.05)
            except queue.Empty:
                if stop is not None and stop.is_set():
                    raise _Stopped from None

    def put(self, buf: mmap.mmap) -> None:
        self._free.put(buf)


@dataclass
class _Chunk:
    buf: mmap.mmap
    starts: list[int]
    ends: list[int]


class DiagDumper:
    """Runs dumps on one socket; hands each parsed chunk to a callback.

    A reader thread receives datagrams into chunk buffers (the kernel does the
    dump work inside recv, with the GIL released) while the calling thread
    walks and parses the previous chunk; at most `buffers` chunks exist.
    """

    def __init__(
        self,
        sock: socket.socket,
        chunk_bytes: int = DEFAULT_CHUNK,
        buffers: int = 3,
        pool: BufferPool | None = None,
    ) -> None:
        self.sock = sock
        self.pid = int(sock.getsockname()[0])
        self.seq = int(time.time()) & 0x7FFFFFFF
        self.chunk_bytes = max(chunk_bytes, RECV_SIZE)
        if pool is not None and pool.size < chunk_buffer_size(self.chunk_bytes):
            raise ValueError(f"pool buffers of {pool.size} bytes are smaller than a chunk")
        self._pool = pool if pool is not None else BufferPool(chunk_buffer_size(self.chunk_bytes), buffers)

    def close(self) -> None:
        self.sock.close()

    def _reader(
        self, out: queue.Queue[_Chunk | BaseException | None], deadline: float | None, stop: threading.Event
    ) -> None:
        sock = self.sock
        try:
            buf = self._pool.get(stop)
            view = memoryview(buf)
            starts: list[int] = []
            ends: list[int] = []
            pos = 0
            while not stop.is_set():
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise DumpTimeout("poll timeout during the netlink dump")
                    sock.settimeout(left)
                try:
                    n = sock.recv_into(view[pos : pos + RECV_SIZE], RECV_SIZE)
                except TimeoutError as exc:
                    raise DumpTimeout("poll timeout during the netlink dump") from exc
                except InterruptedError:
                    continue
                if n <= 0:
                    raise DumpError("netlink socket closed during the dump")
                starts.append(pos)
                ends.append(pos + n)
                final = False
                if may_end_dump(buf, pos, pos + n):
                    walk = walk_messages(buf, pos, pos + n)
                    final = walk.done
                pos += (n + 3) & ~3
                if final or pos >= self.chunk_bytes:
                    out.put(_Chunk(buf, starts, ends))
                    if final:
                        break
                    buf = self._pool.get(stop)
                    view = memoryview(buf)
                    starts, ends, pos = [], [], 0
            out.put(None)
        except _Stopped:
            out.put(None)
        except BaseException as exc:  # handed to the consuming thread
            out.put(exc)

    def dump(
        self,
        family: int,
        states: int,
        on_chunk: Callable[[Parsed], None],
        errors: ErrorCounts,
        *,
        ext: int = DEFAULT_EXT,
        deadline: float | None = None,
    ) -> DumpResult:
        """Dump one address family; raises DumpError/DumpTimeout."""
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        seq = self.seq
        self.sock.settimeout(None)
        self.sock.sendall(build_request(family, states, ext, seq))
        res = DumpResult()
        chunks: queue.Queue[_Chunk | BaseException | None] = queue.Queue()
        stop = threading.Event()
        reader = threading.Thread(target=self._reader, args=(chunks, deadline, stop), daemon=True)
        reader.start()
        failure: BaseException | None = None
        try:
            while True:
                item = chunks.get()
                if item is None:
                    break
                if isinstance(item, BaseException):
                    failure = item
                    break
                try:
                    res.datagrams += len(item.starts)
                    res.bytes += sum(e - s for s, e in zip(item.starts, item.ends, strict=True))
                    walk = walk_datagrams(item.buf, np.array(item.starts), np.array(item.ends), errors)
                    res.interrupted |= walk.interrupted
                    if walk.error:
                        failure = DumpError(f"netlink dump failed: {os.strerror(walk.error)}")
                        break
                    res.messages += int(walk.offsets.shape[0])
                    if walk.offsets.shape[0]:
                        parsed = parse_messages(item.buf, walk.offsets, walk.lengths, errors, seq=seq, pid=self.pid)
                        on_chunk(parsed)
                finally:
                    self._pool.put(item.buf)
        finally:
            stop.set()
            if reader.is_alive():
                # a reader waiting for a free buffer sees `stop`; one in recv finishes it
                reader.join(timeout=max(0.0, (deadline or time.monotonic()) - time.monotonic()) + 1.0)
            while not chunks.empty():
                left = chunks.get_nowait()
                if isinstance(left, _Chunk):
                    self._pool.put(left.buf)
        if failure is not None:
            if isinstance(failure, DumpError):
                raise failure
            if isinstance(failure, OSError):
                raise DumpError(f"netlink recv failed: {failure}") from failure
            raise failure
        return res
