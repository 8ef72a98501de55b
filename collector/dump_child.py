"""`dyncc collect --once`: run the kernel dump in a forked child while the parent imports.

A one-shot collector spends most of its start-up importing numpy, protobuf and
confluent_kafka; the netlink dump does not need any of them.  `early_start`
(called by controller/cli.py before the subcommand module is imported) reads
just the options that shape the dump (--once, --netns, --all-netns, --state,
--timeout, --config), forks a child that dumps every namespace and address
family exactly as DiagDumper would, and streams the raw datagrams over a
socketpair (the kernel buffers them, so the child never waits for the
parent).  The parent later replays the stream through the normal parser
(netlink_diag.ReplayDumper), with the child's netlink pid and sequence numbers
for the usual checks.  The Poller uses the prefetch only when the full
configuration asks for the same namespaces, states and extensions; anything
unexpected drops it and the dump is done in-process as usual.

Stream records: `_REC` header (kind, family, namespace index, a, b, length)
then `length` bytes (datagrams padded to 4):
  BEGIN (a=seq, b=netlink pid)  one per namespace and family, before its data
  DATA                          one received datagram
  OPEN_ERROR                    the namespace's socket could not be made (message)
  FAIL (a=1 on timeout)         the dump failed (message); the child stops
Only stdlib imports here: this module runs before the heavy ones.
"""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import socket
import struct
import sys
import threading
import time
import tomllib
from typing import Any

from collector.diag_socket import (
    DEFAULT_EXT,
    DEFAULT_STATES,
    RECV_SIZE,
    TCP_STATES,
    DumpError,
    DumpTimeout,
    build_request,
    list_namespaces,
    open_socket_or_error,
    state_mask,
)

BEGIN, DATA, OPEN_ERROR, FAIL = 1, 2, 3, 4
_REC = struct.Struct("=HHIIII")
_HDR = struct.Struct("=IH")
_U32 = struct.Struct("=I")
NLMSG_ERROR = 2
NLMSG_DONE = 3
SNDBUF = 256 << 20  # kernel-side buffer for the whole dump of a big host
FAMILIES = (socket.AF_INET, socket.AF_INET6)

_prefetch: Prefetch | None = None


class PrefetchLost(Exception):
    """The stream does not hold the dump asked for next: do it in-process instead."""


def ends_dump(buf: memoryview | bytearray, start: int, end: int) -> bool:
    """Whether a datagram ends the dump (same answer as diag_parse's may_end_dump + walk_messages)."""
    n = end - start
    if n < 16:
        return False
    first = _HDR.unpack_from(buf, start)[1]
    if first not in (NLMSG_DONE, NLMSG_ERROR) and not (n >= 20 and _HDR.unpack_from(buf, end - 20) == (20, NLMSG_DONE)):
        return False
    i = start
    while i + 16 <= end:
        length, mtype = _HDR.unpack_from(buf, i)
        if length < 16 or i + length > end:
            return False
        if mtype == NLMSG_DONE:
            return True
        if mtype == NLMSG_ERROR and length >= 20 and _U32.unpack_from(buf, i + 16)[0] != 0:
            return True
        i += (length + 3) & ~3
    return False


def _child(out: socket.socket, namespaces: list[str], states: int, ext: int, deadline: float) -> None:
    buf = bytearray(_REC.size + RECV_SIZE + 4)
    view = memoryview(buf)
    seq = int(time.time()) & 0x7FFFFFFF

    def record(kind: int, family: int, index: int, a: int = 0, b: int = 0, msg: str = "") -> None:
        data = msg.encode()
        out.sendall(_REC.pack(kind, family, index, a, b, len(data)) + data)

    for index, ns in enumerate(namespaces):
        try:
            sock = open_socket_or_error(ns)
        except DumpError as exc:
            record(OPEN_ERROR, 0, index, msg=str(exc))
            continue
        try:
            pid = int(sock.getsockname()[0])
            for family in FAMILIES:
                seq = (seq + 1) & 0xFFFFFFFF
                sock.settimeout(None)
                sock.sendall(build_request(family, states, ext, seq))
                record(BEGIN, family, index, seq, pid)
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise DumpTimeout("poll timeout during the netlink dump")
                    sock.settimeout(left)
                    try:
                        n = sock.recv_into(view[_REC.size : _REC.size + RECV_SIZE], RECV_SIZE)
                    except TimeoutError as exc:
                        raise DumpTimeout("poll timeout during the netlink dump") from exc
                    if n <= 0:
                        raise DumpError("netlink socket closed during the dump")
                    padded = (n + 3) & ~3
                    view[_REC.size + n : _REC.size + padded] = bytes(padded - n)
                    _REC.pack_into(buf, 0, DATA, family, index, 0, 0, n)
                    out.sendall(view[: _REC.size + padded])
                    if ends_dump(view, _REC.size, _REC.size + n):
                        break
        except DumpTimeout as exc:
            record(FAIL, 0, index, 1, msg=str(exc))
            return
        except DumpError as exc:
            record(FAIL, 0, index, msg=str(exc))
            return
        except OSError as exc:
            record(FAIL, 0, index, msg=f"netlink recv failed: {exc}")
            return
        finally:
            sock.close()


class Prefetch:
    """The parent's end of a dump child: its stream, and what it was asked to dump."""

    def __init__(
        self, namespaces: list[str], states: int, ext: int, sock: socket.socket, pid: int | None = None
    ) -> None:
        self.namespaces = list(namespaces)
        self.states = states
        self.ext = ext
        self.sock: socket.socket | None = sock
        self.pid = pid
        self._pending: tuple[int, int, int, int, int, int] | None = None
        self._hdr = bytearray(_REC.size)

    def matches(self, namespaces: list[str], states: int, ext: int) -> bool:
        return self.sock is not None and (namespaces, states, ext) == (self.namespaces, self.states, self.ext)

    def _settimeout(self, deadline: float | None) -> socket.socket:
        if self.sock is None:
            raise PrefetchLost("prefetch closed")
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DumpTimeout("poll timeout during the netlink dump")
            self.sock.settimeout(left)
        else:
            self.sock.settimeout(None)
        return self.sock

    def read_into(self, view: memoryview, deadline: float | None) -> None:
        """Fill `view` from the stream; DumpTimeout / DumpError on timeout or early end."""
        got = 0
        while got < len(view):
            sock = self._settimeout(deadline)
            try:
                n = sock.recv_into(view[got:])
            except TimeoutError as exc:
                raise DumpTimeout("poll timeout during the netlink dump") from exc
            if n <= 0:
                raise DumpError("the dump child ended early")
            got += n

    def read_record(self, deadline: float | None) -> tuple[int, int, int, int, int, int]:
        """(kind, family, namespace index, a, b, length) of the next record."""
        if self._pending is not None:
            rec, self._pending = self._pending, None
            return rec
        self.read_into(memoryview(self._hdr), deadline)
        kind, family, index, a, b, length = _REC.unpack(self._hdr)
        if kind not in (BEGIN, DATA, OPEN_ERROR, FAIL) or length > RECV_SIZE:
            raise DumpError("bad record from the dump child")
        return kind, family, index, a, b, length

    def read_message(self, length: int, deadline: float | None) -> str:
        data = bytearray(length)
        self.read_into(memoryview(data), deadline)
        return data.decode(errors="replace")

    def open_netns(self, index: int, deadline: float | None) -> None:
        """Before a namespace's dumps: raises its DumpError if the child could not open it."""
        try:
            rec = self.read_record(deadline)
        except DumpError as exc:
            raise PrefetchLost(str(exc)) from exc
        kind, _family, got, _a, _b, length = rec
        if got != index:
            raise PrefetchLost("dump child stream out of order")
        if kind == OPEN_ERROR:
            raise DumpError(self.read_message(length, deadline))
        self._pending = rec

    def close(self) -> None:
        """Stop the child (if still running) and reap it."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.pid is not None:
            pid, self.pid = self.pid, None
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == 0:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def start_child(namespaces: list[str], states: int, ext: int = DEFAULT_EXT, timeout: float = 30.0) -> Prefetch:
    """Fork a child dumping `namespaces` (each AF_INET then AF_INET6); the parent's handle on it."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        child.setsockopt(socket.SOL_SOCKET, 32, SNDBUF)  # SO_SNDBUFFORCE (root)
    except OSError:
        child.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
    deadline = time.monotonic() + timeout
    pid = os.fork()
    if pid == 0:  # the child: dump, stream, leave without running any exit handler
        code = 0
        try:
            parent.close()
            _child(child, list(namespaces), states, ext, deadline)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    child.close()
    return Prefetch(namespaces, states, ext, parent, pid)


def _plan(argv: list[str]) -> tuple[list[str], int, float] | None:
    """(namespaces, state mask, timeout) when argv is a one-shot collect, else None."""
    if any(a in ("-h", "--help") for a in argv):
        return None
    p = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    p.add_argument("--config")
    p.add_argument("--once", action="store_const", const=True)
    p.add_argument("--netns", action="append")
    p.add_argument("--all-netns", action="store_const", const=True)
    p.add_argument("--state", action="append")
    p.add_argument("--timeout")
    args, _ = p.parse_known_args(argv)
    raw: dict[str, Any] = {
        "once": False,
        "netns": [],
        "all_netns": False,
        "state": list(DEFAULT_STATES),
        "timeout": "30s",
    }
    if args.config:
        with open(args.config, "rb") as fh:
            doc = tomllib.load(fh)
        if isinstance(doc.get("collect"), dict):
            doc = doc["collect"]
        for key, value in doc.items():
            norm = key.replace("-", "_")
            if norm in raw:
                raw[norm] = value if norm not in ("netns", "state") or isinstance(value, list) else [value]
    for key in raw:
        if getattr(args, key) is not None:
            raw[key] = getattr(args, key)
    if raw["once"] is not True or (raw["netns"] and raw["all_netns"] is True):
        return None
    states: set[int] = set()
    for name in raw["state"]:
        for part in str(name).split(","):
            states.add(TCP_STATES[part.strip().lower().replace("_", "-")])
    from collector.daemon import parse_duration

    timeout = parse_duration(raw["timeout"], "timeout")
    if not states or timeout <= 0:
        return None
    return (
        list_namespaces([str(n) for n in raw["netns"]], raw["all_netns"] is True),
        state_mask(sorted(states)),
        timeout,
    )


def early_start(argv: list[str]) -> None:
    """Fork the dump child for `dyncc collect --once ...`, when that is safe and useful.

    Only in a fresh single-threaded interpreter that has not imported numpy yet
    (not inside a test process); any doubt about the options means no prefetch.
    """
    global _prefetch
    if _prefetch is not None or "numpy" in sys.modules or threading.active_count() != 1:
        return
    try:
        plan = _plan(argv)
    except (Exception, SystemExit):
        return
    if plan is None:
        return
    namespaces, states, timeout = plan
    try:
        _prefetch = start_child(namespaces, states, DEFAULT_EXT, timeout)
    except OSError:
        return
    atexit.register(_prefetch.close)


def take_prefetch() -> Prefetch | None:
    """The running dump child's handle (once), or None."""
    global _prefetch
    pf, _prefetch = _prefetch, None
    return pf
