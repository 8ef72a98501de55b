"""Start the kernel dump of `dyncc collect --once` while the parser is still being imported.

A one-shot collector spends about as long importing numpy as the kernel needs
to dump 100k sockets.  `Prefetch.start()` (numpy-free, called before those
imports) opens the sock_diag sockets, then forks a helper process that only
receives: it sends the dump requests (every namespace, AF_INET then AF_INET6)
and receives the replies into a ring of chunk slots in shared memory, telling
the parent over a pipe which slot holds which datagrams.  The parent parses a
slot (netlink.sockdiag_dump.process_chunk, exactly as for its own dumps) and hands it
back over a second pipe, so memory is bounded by the ring whatever the socket
count: when every slot is full the helper waits.

The Poller asks `take()` for a (namespace, family) dump and consumes it with
`dump()`; anything the prefetch does not hold (a retried interrupted dump,
different states) is dumped in-process as usual.  The helper is a plain
recv loop (no threads exist when it is forked) that ends with os._exit; the
parent kills and reaps it in `close()`, and a helper that dies is a DumpError
for the namespace being read, never a hang: reads honour the poll deadline.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import select
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from collector.netlink.sockdiag import (
    DEFAULT_EXT,
    RECV_SIZE,
    DumpError,
    DumpTimeout,
    build_request,
    may_end_dump,
    open_diag_socket,
    walk_messages,
)
from collector.telemetry import timeline

if TYPE_CHECKING:
    from collector.netlink.sockdiag_dump import DumpResult
    from collector.netlink.sockdiag_parse import ErrorCounts, Parsed

FAMILIES = (socket.AF_INET, socket.AF_INET6)
#: The ring: 12 slots of 2 MiB, each reused a few times per 100k-socket dump: fewer, larger
#: slots put every byte on a fresh shared page and slowed the helper's dump, the critical path
#: of a one-shot run; 24 MiB still holds what arrives while the parent imports numpy
#: (figures: docs/performance.md, Start-up).
DEFAULT_CHUNK_BYTES = 2 * 1024 * 1024
DEFAULT_SLOTS = 12
#: Bytes past a slot's chunk: one more datagram plus room for the parser's zero padding.
SLOT_SLACK = RECV_SIZE + 4096
_REC = struct.Struct("=iiiii")  # job, slot (-1: none), datagrams, flags, errno
_SLOT = struct.Struct("=i")
_FINAL = 1
_FAILED = 2
_HELPER_RECV_TIMEOUT = 120.0  # a helper whose parent vanished must not wait forever


class PrefetchJob:
    """One dump the helper does: a family of a namespace, on that namespace's socket."""

    __slots__ = ("family", "netns", "pid", "seq", "sock")

    def __init__(self, netns: str, family: int, sock: socket.socket, seq: int, pid: int) -> None:
        self.netns, self.family, self.sock, self.seq, self.pid = netns, family, sock, seq, pid


class _Record:
    """The helper's report of one filled slot (slot -1: none, e.g. a failed dump)."""

    __slots__ = ("ends", "error", "failed", "final", "job", "slot", "starts")

    def __init__(
        self, job: int, slot: int, starts: list[int], ends: list[int], final: bool, error: int, failed: bool
    ) -> None:
        self.job, self.slot, self.starts, self.ends = job, slot, starts, ends
        self.final, self.error, self.failed = final, error, failed  # error: errno in the helper, 0 if none


class Prefetch:
    """A helper process dumping `jobs` in order into shared chunk slots of `slot_size` bytes.

    (Plain classes here, not dataclasses: this module is imported before the
    dump starts, where every millisecond of start-up delays it.)
    """

    def __init__(
        self,
        jobs: list[PrefetchJob],
        states: int,
        ext: int,
        chunk_bytes: int,
        slot_size: int,
        mem: mmap.mmap,
        child: int,
        ready: int,
        free: int,
        started_ns: int,
    ) -> None:
        self.jobs = jobs
        self.states = states
        self.ext = ext
        self.chunk_bytes = chunk_bytes
        self.slot_size = slot_size
        self.mem = mem
        self.child = child
        self.ready = ready  # read end: records from the helper
        self.free = free  # write end: slots handed back
        self.started_ns = started_ns
        self.next_job = 0
        self.pending: _Record | None = None
        self.closed = False

    @classmethod
    def start(
        cls,
        namespaces: Sequence[str],
        states: int,
        *,
        ext: int = DEFAULT_EXT,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        slots: int = DEFAULT_SLOTS,
    ) -> Prefetch | None:
        """Open the sockets and fork the helper; None when nothing can be prefetched.

        Namespaces whose socket cannot be opened are left out (the in-process
        dump reports them).  Refuses (None) when other threads exist: forking
        a threaded process is not safe.
        """
        if threading.active_count() != 1 or not hasattr(os, "fork"):
            return None
        started_ns = time.time_ns()
        jobs: list[PrefetchJob] = []
        seq = int(time.time()) & 0x3FFFFFFF
        for ns in namespaces:
            try:
                sock = open_diag_socket(ns or None)
            except (DumpError, OSError):
                continue
            pid = int(sock.getsockname()[0])
            for family in FAMILIES:
                seq += 1
                jobs.append(PrefetchJob(ns, family, sock, seq, pid))
        if not jobs:
            return None
        chunk_bytes = max(chunk_bytes, RECV_SIZE)
        slot_size = -(-(chunk_bytes + SLOT_SLACK) // mmap.PAGESIZE) * mmap.PAGESIZE
        slots = max(slots, 2)
        mem = mmap.mmap(-1, slot_size * slots)  # MAP_SHARED: the helper writes, we read
        ready_r, ready_w = os.pipe()
        free_r, free_w = os.pipe()
        try:
            child = os.fork()
        except OSError:
            for fd in (ready_r, ready_w, free_r, free_w):
                os.close(fd)
            mem.close()
            _close_sockets(jobs)
            return None
        if child == 0:  # pragma: no cover - runs in the helper (tested end to end)
            status = 1
            try:
                os.close(ready_r)
                os.close(free_w)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                _helper(jobs, states, ext, chunk_bytes, slot_size, slots, mem, ready_w, free_r)
                status = 0
            finally:
                os._exit(status)
        os.close(ready_w)
        os.close(free_r)
        return cls(jobs, states, ext, chunk_bytes, slot_size, mem, child, ready_r, free_w, started_ns)

    # ------------------------------------------------------------ parent side

    def plan(self) -> tuple[list[str], int]:
        """(namespaces in dump order, state mask) this helper was started for."""
        namespaces: list[str] = []
        for job in self.jobs:
            if job.netns not in namespaces:
                namespaces.append(job.netns)
        return namespaces, self.states

    def take(self, netns: str, family: int, states: int, ext: int) -> int | None:
        """The job index holding this dump (jobs before it are skipped), or None."""
        if self.closed:
            return None
        for i in range(self.next_job, len(self.jobs)):
            job = self.jobs[i]
            if job.netns == netns and job.family == family:
                if states != self.states or ext != self.ext:
                    return None
                self.next_job = i + 1
                return i
        return None

    def dump(
        self,
        index: int,
        on_chunk: Callable[[Parsed], None],
        errors: ErrorCounts,
        deadline: float | None = None,
    ) -> DumpResult:
        """Parse job `index`'s chunks into `on_chunk`; DumpError / DumpTimeout like DiagDumper.dump."""
        from collector.netlink.sockdiag_dump import DumpResult, process_chunk

        job = self.jobs[index]
        timeline.mark(f"parse{index}")
        res = DumpResult()
        failure: DumpError | None = None
        while True:
            rec = self._next(deadline)
            if rec.job > index:  # cannot happen: the helper works in job order
                self.pending = rec
                raise DumpError("dump helper skipped a dump")
            if rec.job == index and failure is None:
                if rec.failed:
                    failure = DumpError(f"netlink recv failed: {os.strerror(rec.error) if rec.error else 'helper'}")
                elif rec.slot >= 0:
                    view = memoryview(self.mem)[rec.slot * self.slot_size : (rec.slot + 1) * self.slot_size]
                    try:
                        failure = process_chunk(view, rec.starts, rec.ends, res, errors, on_chunk, job.seq, job.pid)
                    finally:
                        with contextlib.suppress(BufferError):  # an exception's frames hold an array on it
                            view.release()
                        self._release(rec.slot)
                    if failure is not None:
                        break
                    if rec.final:
                        break
                    continue
            if rec.slot >= 0:
                self._release(rec.slot)
            if rec.job == index and rec.final:
                break
        if failure is not None:
            raise failure
        return res

    def _release(self, slot: int) -> None:
        start = slot * self.slot_size
        # drop the slot from our resident set; the helper refills the same pages
        with contextlib.suppress(AttributeError, OSError, ValueError):
            self.mem.madvise(mmap.MADV_DONTNEED, start, self.slot_size)
        with contextlib.suppress(OSError):  # helper gone: nothing waits for the slot
            os.write(self.free, _SLOT.pack(slot))

    def _read(self, n: int, deadline: float | None) -> bytes:
        out = b""
        while len(out) < n:
            timeout = None if deadline is None else deadline - time.monotonic()
            if timeout is not None and timeout <= 0:
                raise DumpTimeout("poll timeout during the netlink dump")
            waited = time.monotonic_ns()
            got, _, _ = select.select([self.ready], [], [], timeout)
            timeline.spent("helper_wait", time.monotonic_ns() - waited)
            if not got:
                raise DumpTimeout("poll timeout during the netlink dump")
            part = os.read(self.ready, n - len(out))
            if not part:
                raise DumpError("the dump helper process exited early")
            out += part
        return out

    def _next(self, deadline: float | None) -> _Record:
        if self.pending is not None:
            rec, self.pending = self.pending, None
            return rec
        job, slot, count, flags, err = _REC.unpack(self._read(_REC.size, deadline))
        if not 0 <= job < len(self.jobs) or not 0 <= count <= self.slot_size // 4 or not -1 <= slot < self.slots:
            raise DumpError("bad record from the dump helper")
        words = struct.unpack(f"={2 * count}i", self._read(8 * count, deadline)) if count else ()
        starts, ends = list(words[:count]), list(words[count:])
        limit = self.chunk_bytes + RECV_SIZE
        if any(not 0 <= a < b <= limit for a, b in zip(starts, ends, strict=True)):
            raise DumpError("bad record from the dump helper")
        return _Record(job, slot, starts, ends, bool(flags & _FINAL), err, bool(flags & _FAILED))

    @property
    def slots(self) -> int:
        return len(self.mem) // self.slot_size

    def close(self) -> None:
        """Stop and reap the helper; close the pipes, sockets and shared memory."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.child, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.child, 0)
        for fd in (self.ready, self.free):
            os.close(fd)
        _close_sockets(self.jobs)
        with contextlib.suppress(BufferError):  # a view is still exported; the mapping goes with it
            self.mem.close()


def _close_sockets(jobs: list[PrefetchJob]) -> None:
    for job in jobs:
        job.sock.close()


# ------------------------------------------------------------ helper side


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _helper(
    jobs: list[PrefetchJob],
    states: int,
    ext: int,
    chunk_bytes: int,
    slot_size: int,
    slots: int,
    mem: mmap.mmap,
    ready: int,
    free_fd: int,
) -> None:
    """Dump every job in order into free slots; report each filled slot on `ready`."""
    free = list(range(slots - 1, -1, -1))
    view = memoryview(mem)

    def get_slot() -> int:
        if not free:
            data = os.read(free_fd, _SLOT.size * slots)
            if not data:
                raise SystemExit(1)  # the parent is gone
            free.extend(s for (s,) in _SLOT.iter_unpack(data[: len(data) - len(data) % _SLOT.size]))
        return free.pop()

    def emit(index: int, slot: int, starts: list[int], ends: list[int], flags: int, err: int = 0) -> None:
        count = len(starts)
        _write_all(ready, _REC.pack(index, slot, count, flags, err) + struct.pack(f"={2 * count}i", *starts, *ends))

    for index, job in enumerate(jobs):
        job.sock.settimeout(_HELPER_RECV_TIMEOUT)
        slot = -1
        try:
            job.sock.sendall(build_request(job.family, states, ext, job.seq))
            slot = get_slot()
            base, pos = slot * slot_size, 0
            starts: list[int] = []
            ends: list[int] = []
            while True:
                n = job.sock.recv_into(view[base + pos : base + pos + RECV_SIZE], RECV_SIZE)
                if n <= 0:
                    raise OSError(errno.ECONNRESET, "netlink socket closed during the dump")
                starts.append(pos)
                ends.append(pos + n)
                final = (
                    may_end_dump(mem, base + pos, base + pos + n)
                    and walk_messages(mem, base + pos, base + pos + n).done
                )
                pos += (n + 3) & ~3
                if final or pos >= chunk_bytes:
                    emit(index, slot, starts, ends, _FINAL if final else 0)
                    slot = -1
                    if final:
                        break
                    slot = get_slot()
                    base, pos, starts, ends = slot * slot_size, 0, [], []
        except OSError as exc:
            if slot >= 0:
                free.append(slot)
            emit(index, -1, [], [], _FINAL | _FAILED, exc.errno or 0)
