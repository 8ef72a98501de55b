"""Netlink route I/O of the edge agent (the only module that writes routes).

`RouteTable` holds one NETLINK_ROUTE socket in the target namespace (opened
with pyroute2's netns helper) and:

- dumps the main table (optionally kernel-filtered by protocol);
- writes batches of add/delete requests, many per sendmsg, and collects every
  ack; any error stops the batch and raises RouteWriteError;
- only ever writes routes tagged with its own protocol number: deletes carry
  `proto`, which the kernel matches, so a foreign route is never removed.

`fail_after=N` makes the (N+1)-th route write of the next batch fail (one
shot), for tests of the rollback path.
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import os
import select
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from collector.agent.plan import Route
from collector.netlink.abi import (
    NETLINK_CAP_ACK,
    NETLINK_EXT_ACK,
    NETLINK_GET_STRICT_CHK,
    NLM_F_CREATE,
    NLM_F_EXCL,
    NLMSG_DONE,
    NLMSG_ERROR,
    SOL_NETLINK,
)
from collector.netlink.rtnetlink import (
    CC_ALGO_LOCK_BIT,
    RT_SCOPE_NOWHERE,
    RT_TABLE_MAIN,
    RTM_DELROUTE,
    RTM_NEWROUTE,
    RouteRecord,
    encode_dump,
    encode_route,
    iter_messages,
    parse_error,
    parse_route,
)
from dyncc_common.errors import DynccError

RECV_BUFFER = 1 << 18
SOCKET_BUFFER = 8 << 20
SO_SNDBUFFORCE = 32  # asm-generic/socket.h (not exported by the socket module)
SO_RCVBUFFORCE = 33


class RouteWriteError(DynccError):
    """A route request failed; earlier requests of the batch may have been applied."""


@dataclass(frozen=True)
class RouteOp:
    kind: str  # "add" or "del"
    route: Route


def open_netlink(netns: str | None, groups: int = 0) -> socket.socket:
    """A NETLINK_ROUTE socket in `netns` (None = our own namespace); never creates a namespace."""
    if netns:
        if not os.path.exists(f"/run/netns/{netns}") and not os.path.exists(netns):
            raise FileNotFoundError(f"network namespace {netns!r} does not exist")
        from pyroute2 import netns as pr_netns

        sock = pr_netns.create_socket(netns, socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE, flags=0)
    else:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    for force, plain in ((SO_RCVBUFFORCE, socket.SO_RCVBUF), (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, SOCKET_BUFFER)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, plain, SOCKET_BUFFER)
    for opt in (NETLINK_CAP_ACK, NETLINK_EXT_ACK, NETLINK_GET_STRICT_CHK):
        with contextlib.suppress(OSError):  # older kernels: plain acks, userspace filtering
            sock.setsockopt(SOL_NETLINK, opt, 1)
    sock.bind((0, groups))
    return sock


class RouteTable:
    def __init__(
        self,
        netns: str | None,
        *,
        proto: int = 250,
        table: int = RT_TABLE_MAIN,
        batch: int = 256,
        timeout: float = 10.0,
        fail_after: int | None = None,
    ) -> None:
        if not 1 <= proto <= 255:
            raise ValueError(f"routing protocol number {proto} out of range 1..255")
        self.netns = netns
        self.proto = proto
        self.table = table
        self.batch = batch
        self.timeout = timeout
        self.fail_after = fail_after
        self.malformed = 0
        self._sock = open_netlink(netns)
        self._seq = 0
        self._buf = bytearray(RECV_BUFFER)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> RouteTable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next_seq(self) -> int:
        self._seq = (self._seq + 1) & 0xFFFFFFFF or 1
        return self._seq

    def _recv(self) -> memoryview:
        ready, _, _ = select.select([self._sock], [], [], self.timeout)
        if not ready:
            raise TimeoutError(f"no netlink answer within {self.timeout:g}s")
        size = self._sock.recv_into(self._buf)
        return memoryview(self._buf)[:size]

    # ------------------------------------------------------------------ reads

    def dump(self, *, owned_only: bool = False) -> list[RouteRecord]:
        """Main-table routes of both families (only ours with owned_only)."""
        records: list[RouteRecord] = []
        for family in (socket.AF_INET, socket.AF_INET6):
            seq = self._next_seq()
            self._sock.send(encode_dump(seq, family, table=self.table, proto=self.proto if owned_only else 0))
            done = False
            while not done:
                for msg_type, flags, mseq, payload in iter_messages(self._recv()):
                    if mseq != seq:
                        continue
                    if msg_type == NLMSG_DONE:
                        done = True
                        break
                    if msg_type == NLMSG_ERROR:
                        code, text = parse_error(payload, flags)
                        raise OSError(code, f"route dump failed: {text or os.strerror(code)}")
                    rec = parse_route(payload)
                    if rec is None:
                        self.malformed += 1
                    elif rec.table == self.table and (not owned_only or rec.proto == self.proto):
                        records.append(rec)
        return records

    # ----------------------------------------------------------------- writes

    def _encode(self, seq: int, op: RouteOp) -> bytes:
        route = op.route
        dst, _, length = route.prefix.partition("/")  # canonical "addr/len" (validated upstream)
        nh = route.nexthop
        if op.kind == "del":
            return encode_route(
                seq,
                RTM_DELROUTE,
                0,
                family=nh.family,
                dst=dst,
                dst_len=int(length),
                proto=self.proto,
                table=self.table,
                scope=RT_SCOPE_NOWHERE,
                rtype=0,
                priority=nh.priority,
            )
        return encode_route(
            seq,
            RTM_NEWROUTE,
            NLM_F_CREATE | NLM_F_EXCL,
            family=nh.family,
            dst=dst,
            dst_len=int(length),
            proto=self.proto,
            table=self.table,
            scope=nh.scope,
            gateway=nh.gateway,
            oif=nh.oif,
            prefsrc=nh.prefsrc,
            priority=nh.priority,
            nh_id=nh.nh_id,
            metrics=nh.metrics,
            lock=nh.lock | (CC_ALGO_LOCK_BIT if route.lock else 0),
            cc_algo=route.algorithm or None,
        )

    def write(self, ops: Sequence[RouteOp]) -> int:
        """Send `ops` in batches and wait for every ack; returns how many succeeded."""
        inject_at: int | None = None
        if self.fail_after is not None:
            inject_at, self.fail_after = self.fail_after, None
        done = 0
        todo = list(ops) if inject_at is None else list(ops)[: max(inject_at, 0)]
        for start in range(0, len(todo), self.batch):
            chunk = todo[start : start + self.batch]
            done += self._write_chunk(chunk)
        if inject_at is not None and inject_at < len(ops):
            raise RouteWriteError(f"injected failure after {done} route writes")
        return done

    def _write_chunk(self, chunk: Sequence[RouteOp]) -> int:
        pending: dict[int, RouteOp] = {}
        payload = bytearray()
        for op in chunk:
            seq = self._next_seq()
            pending[seq] = op
            payload += self._encode(seq, op)
        self._sock.send(payload)
        failures: list[str] = []
        while pending:
            for msg_type, flags, seq, body in iter_messages(self._recv()):
                if seq not in pending or msg_type != NLMSG_ERROR:
                    continue
                op = pending.pop(seq)
                code, text = parse_error(body, flags)
                if code == 0 or (op.kind == "del" and code == errno_mod.ESRCH):
                    continue
                reason = text or (os.strerror(code) if code > 0 else "bad netlink ack")
                failures.append(f"{op.kind} {op.route.prefix}: {reason}")
        if failures:
            more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
            raise RouteWriteError(failures[0] + more)
        return len(chunk)


def ops_for(remove: Iterable[Route], add: Iterable[Route]) -> list[RouteOp]:
    """Deletes first (a changed route is deleted, then re-added), then adds."""
    return [RouteOp("del", r) for r in remove] + [RouteOp("add", r) for r in add]
