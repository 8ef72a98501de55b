"""NETLINK_SOCK_DIAG dump I/O: one raw AF_NETLINK socket, SOCK_DIAG_BY_FAMILY dumps.

The dump is received straight into chunk buffers by a reader thread.  With
recvmmsg (collector.netlink.recvmmsg, the default where libc has it) one call
receives every datagram the kernel produces until the chunk's slots are full,
each datagram in its own RECV_SIZE slot, with the GIL released for the whole
call: the kernel's dump work (done inside the receive calls) never waits for
the thread that parses.  Without it, one recv_into() per datagram packs the
datagrams back to back (netlink datagrams are 4-aligned streams of whole
messages).  Either way a full chunk is a list of datagram (start, end) ranges
that sockdiag_parse walks and decodes in a single vectorized pass (parsing
copies everything out, so the buffer is reused).  Buffers come from a
BufferPool: anonymous mmaps made on first use (no up-front zeroing; untouched
pages cost no memory) and kept for later dumps.  Memory stays bounded by the
pool whatever the number of sockets.

Namespaces: the socket is created inside the named namespace (setns on this
thread, then back), and keeps dumping that namespace afterwards.
"""

from __future__ import annotations

import mmap
import os
import queue
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from collector.netlink.recvmmsg import MultiRecv
from collector.netlink.sockdiag import (
    DEFAULT_CHUNK,
    DEFAULT_EXT,
    RECV_SIZE,
    Buf,
    DumpError,
    DumpTimeout,
    build_request,
    may_end_dump,
    walk_messages,
)
from collector.netlink.sockdiag_parse import PAD, ErrorCounts, Parsed, parse_messages, walk_datagrams
from dyncc_common.errors import DynccError


@dataclass
class DumpResult:
    messages: int = 0
    datagrams: int = 0
    bytes: int = 0
    interrupted: bool = False


def chunk_buffer_size(chunk_bytes: int) -> int:
    """Bytes of a chunk buffer: the chunk, one more datagram, and the parser's zero padding."""
    return max(chunk_bytes, RECV_SIZE) + RECV_SIZE + PAD


def process_chunk(
    buf: Buf,
    starts: list[int],
    ends: list[int],
    res: DumpResult,
    errors: ErrorCounts,
    on_chunk: Callable[[Parsed], None],
    seq: int,
    pid: int,
) -> DumpError | None:
    """Walk and parse one chunk of received datagrams (buf[starts[j]:ends[j]]) into `on_chunk`.

    Returns the DumpError when the kernel reported one (the dump is over), else None.
    """
    res.datagrams += len(starts)
    res.bytes += sum(e - s for s, e in zip(starts, ends, strict=True))
    walk = walk_datagrams(buf, np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64), errors)
    res.interrupted |= walk.interrupted
    if walk.error:
        return DumpError(f"netlink dump failed: {os.strerror(walk.error)}")
    res.messages += int(walk.offsets.shape[0])
    if walk.offsets.shape[0]:
        on_chunk(parse_messages(buf, walk.offsets, walk.lengths, errors, seq=seq, pid=pid))
    return None


class _Stopped(DynccError):
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
    multi=False receives with one recv_into per datagram instead of recvmmsg.
    """

    def __init__(
        self,
        sock: socket.socket,
        chunk_bytes: int = DEFAULT_CHUNK,
        buffers: int = 3,
        pool: BufferPool | None = None,
        *,
        multi: bool = True,
    ) -> None:
        self.sock = sock
        self.pid = int(sock.getsockname()[0])
        self.seq = int(time.time()) & 0x7FFFFFFF
        self.chunk_bytes = max(chunk_bytes, RECV_SIZE)
        if pool is not None and pool.size < chunk_buffer_size(self.chunk_bytes):
            raise ValueError(f"pool buffers of {pool.size} bytes are smaller than a chunk")
        self._pool = pool if pool is not None else BufferPool(chunk_buffer_size(self.chunk_bytes), buffers)
        self._use_multi = multi
        self._multi: MultiRecv | None = None

    def close(self) -> None:
        self.sock.close()

    def _receiver(self) -> MultiRecv | None:
        """recvmmsg for this socket (one call fills many chunk slots), or None: recv_into per datagram."""
        if self._multi is None and self._use_multi:
            try:
                self._multi = MultiRecv(self.sock, -(-self.chunk_bytes // RECV_SIZE))
            except OSError:
                self._use_multi = False
        return self._multi

    def _reader(
        self, out: queue.Queue[_Chunk | BaseException | None], deadline: float | None, stop: threading.Event
    ) -> None:
        sock = self.sock
        multi = self._receiver()
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
                    if multi is not None:
                        ready, _, _ = select.select([sock], [], [], left)
                        if not ready:
                            raise DumpTimeout("poll timeout during the netlink dump")
                    else:
                        sock.settimeout(left)
                try:
                    if multi is not None:
                        # slots of RECV_SIZE bytes from pos up to the chunk's end, one call
                        got = multi.recv(buf, pos, -(-(self.chunk_bytes - pos) // RECV_SIZE), RECV_SIZE)
                        stride = RECV_SIZE
                    else:
                        got = [sock.recv_into(view[pos : pos + RECV_SIZE], RECV_SIZE)]
                        stride = 0
                except TimeoutError as exc:
                    raise DumpTimeout("poll timeout during the netlink dump") from exc
                except InterruptedError:
                    continue
                final = False
                for n in got:
                    if n <= 0:
                        raise DumpError("netlink socket closed during the dump")
                    starts.append(pos)
                    ends.append(pos + n)
                    if may_end_dump(buf, pos, pos + n):
                        final = walk_messages(buf, pos, pos + n).done
                    pos += stride or (n + 3) & ~3
                    if final:
                        break
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
                    failure = process_chunk(item.buf, item.starts, item.ends, res, errors, on_chunk, seq, self.pid)
                finally:
                    self._pool.put(item.buf)
                if failure is not None:
                    break
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
