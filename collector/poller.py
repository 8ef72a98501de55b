"""One poll: dump every namespace's TCP sockets and encode them as TcpInfoBatch messages.

Parsed chunks are filtered, given client prefixes and encoded into batch bodies
as they arrive (so memory follows the row cap, not the socket count); headers
are written when a namespace is finished, because they carry the namespace's
totals and batch_count.  Batches never mix namespaces; `sequence` grows by one
per batch for the life of the Poller (per host), `run_id` is its start time.
A dump flagged NLM_F_DUMP_INTR is thrown away and retried once.

`poll_once(...)` is the in-process entry point for the demo and tests.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from collector import __version__
from collector.batch_codec import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    BatchHeader,
    encode_header,
    split_bodies,
)
from collector.diag_parse import ErrorCounts, Parsed
from collector.filters import DEFAULT_EXCLUDES, FilterSpec, apply_filters, parse_networks
from collector.netlink_diag import (
    DEFAULT_CHUNK,
    DEFAULT_EXT,
    DEFAULT_STATES,
    TCP_STATES,
    DiagDumper,
    DumpError,
    DumpTimeout,
    open_diag_socket,
    state_mask,
)
from collector.prefixes import client_prefixes

log = logging.getLogger("dyncc.collect")
NETNS_RUN_DIR = "/var/run/netns"


@dataclass
class PollerConfig:
    host: str = field(default_factory=socket.gethostname)
    pop: str = ""
    netns: Sequence[str] = ()  # empty: the collector's own namespace
    all_netns: bool = False
    states: Sequence[int] = tuple(TCP_STATES[s] for s in DEFAULT_STATES)
    filters: FilterSpec = field(
        default_factory=lambda: FilterSpec(exclude=tuple(parse_networks(DEFAULT_EXCLUDES)))
    )
    prefix_v4: int = 24
    prefix_v6: int = 56
    max_rows: int = DEFAULT_MAX_ROWS
    max_bytes: int = DEFAULT_MAX_BYTES
    chunk_bytes: int = DEFAULT_CHUNK
    ext: int = DEFAULT_EXT


@dataclass
class NetnsStats:
    netns: str
    seen: int = 0
    exported: int = 0
    filtered: Counter[str] = field(default_factory=Counter)
    errors: ErrorCounts = field(default_factory=ErrorCounts)
    retried: bool = False


@dataclass
class PollResult:
    batches: list[bytes]
    start_ns: int
    end_ns: int
    namespaces: list[NetnsStats]
    failed_netns: dict[str, str] = field(default_factory=dict)

    @property
    def seen(self) -> int:
        return sum(s.seen for s in self.namespaces)

    @property
    def exported(self) -> int:
        return sum(s.exported for s in self.namespaces)

    @property
    def filtered(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for s in self.namespaces:
            total.update(s.filtered)
        return total

    @property
    def errors(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for s in self.namespaces:
            total.update({k: v for k, v in s.errors.items() if v})
        return total

    @property
    def bytes(self) -> int:
        return sum(len(b) for b in self.batches)


class _Encoder:
    """Filters parsed chunks and turns them into (rows, body) pieces for one dump."""

    def __init__(self, cfg: PollerConfig, cc_names: list[str], stats: NetnsStats) -> None:
        self.cfg = cfg
        self.cc_names = cc_names
        self.stats = stats
        self.seen = 0
        self.exported = 0
        self.filtered: Counter[str] = Counter()
        self.pending: list[dict[str, np.ndarray]] = []
        self.pending_rows = 0
        self.bodies: list[tuple[int, bytes]] = []

    def __call__(self, parsed: Parsed) -> None:
        cols = parsed.columns
        self.seen += parsed.rows
        if not parsed.rows:
            return
        # remap chunk-local cc indexes into the namespace's table
        remap = np.array([self._cc(name) for name in parsed.cc_names], dtype=np.uint32)
        cols["cc_index"] = remap[cols["cc_index"]]
        keep = apply_filters(cols, self.cfg.filters, self.filtered)
        if not keep.all():
            cols = {k: v[keep] for k, v in cols.items()}
        rows = int(cols["state"].shape[0])
        if not rows:
            return
        prefix, plen = client_prefixes(cols["dst_addr"], self.cfg.prefix_v4, self.cfg.prefix_v6)
        cols["client_prefix"] = prefix
        cols["client_prefix_len"] = plen
        self.exported += rows
        self.pending.append(cols)
        self.pending_rows += rows
        if self.pending_rows >= self.cfg.max_rows:
            self._flush()

    def _cc(self, name: str) -> int:
        if name not in self.cc_names:
            self.cc_names.append(name)
        return self.cc_names.index(name)

    def _flush(self) -> None:
        """Encode everything pending (rows spread evenly over the batches)."""
        if not self.pending:
            return
        if len(self.pending) == 1:
            merged = self.pending[0]
        else:
            merged = {k: np.concatenate([p[k] for p in self.pending]) for k in self.pending[0]}
        self.bodies.extend(split_bodies(merged, self.cfg.max_rows, self.cfg.max_bytes))
        self.pending, self.pending_rows = [], 0

    def finish(self) -> list[tuple[int, bytes]]:
        self._flush()
        return self.bodies


def list_namespaces(cfg: PollerConfig) -> list[str]:
    """Namespaces to dump this poll ('' = the collector's own)."""
    if cfg.all_netns:
        try:
            names = sorted(os.listdir(NETNS_RUN_DIR))
        except FileNotFoundError:
            names = []
        return ["", *names]
    return list(cfg.netns) or [""]


class Poller:
    """Keeps the per-host sequence and run_id across polls."""

    def __init__(self, cfg: PollerConfig, run_id: int | None = None) -> None:
        self.cfg = cfg
        self.run_id = time.time_ns() if run_id is None else run_id
        self.sequence = 0
        self._states = state_mask(tuple(cfg.states))

    def poll(self, deadline: float | None = None) -> PollResult:
        """Dump all namespaces; raises DumpTimeout when the deadline passes."""
        start_ns = time.time_ns()
        pieces: list[tuple[NetnsStats, list[str], list[tuple[int, bytes]]]] = []
        failed: dict[str, str] = {}
        for ns in list_namespaces(self.cfg):
            try:
                pieces.append(self._dump_netns(ns, deadline))
            except DumpTimeout:
                raise
            except DumpError as exc:
                failed[ns] = str(exc)
                log.warning("netns %s: %s", ns or "(own)", exc)
        end_ns = time.time_ns()
        batches: list[bytes] = []
        for stats, cc_names, bodies in pieces:
            header = BatchHeader(
                host=self.cfg.host,
                pop=self.cfg.pop,
                netns=stats.netns,
                run_id=self.run_id,
                poll_start_ns=start_ns,
                poll_end_ns=end_ns,
                sockets_seen=stats.seen,
                sockets_exported=stats.exported,
                sockets_filtered=sum(stats.filtered.values()),
                parse_errors={k: v for k, v in stats.errors.items() if v},
                cc_names=cc_names,
                client_prefix_len_v4=self.cfg.prefix_v4,
                client_prefix_len_v6=self.cfg.prefix_v6,
                collector_version=__version__,
            )
            if not bodies:
                bodies = [(0, b"")]
            for i, (rows, body) in enumerate(bodies):
                head = encode_header(
                    header, sequence=self.sequence, batch_index=i, batch_count=len(bodies), row_count=rows
                )
                self.sequence += 1
                batches.append(head + body)
        return PollResult(
            batches=batches,
            start_ns=start_ns,
            end_ns=end_ns,
            namespaces=[p[0] for p in pieces],
            failed_netns=failed,
        )

    def _dump_netns(
        self, ns: str, deadline: float | None
    ) -> tuple[NetnsStats, list[str], list[tuple[int, bytes]]]:
        stats = NetnsStats(netns=ns)
        cc_names: list[str] = [""]
        bodies: list[tuple[int, bytes]] = []
        try:
            sock = open_diag_socket(ns or None)
        except OSError as exc:
            raise DumpError(f"cannot open a sock_diag socket: {exc}") from exc
        dumper = DiagDumper(sock, self.cfg.chunk_bytes)
        try:
            for family in (socket.AF_INET, socket.AF_INET6):
                for attempt in (0, 1):
                    enc = _Encoder(self.cfg, cc_names, stats)
                    errors = ErrorCounts()
                    res = dumper.dump(family, self._states, enc, errors, ext=self.cfg.ext, deadline=deadline)
                    stats.errors.update(errors)
                    if res.interrupted and attempt == 0:
                        stats.retried = True
                        continue
                    break
                bodies.extend(enc.finish())
                stats.seen += enc.seen
                stats.exported += enc.exported
                stats.filtered.update(enc.filtered)
        finally:
            dumper.close()
        return stats, cc_names, bodies


def poll_once(
    netns: Sequence[str] = (),
    *,
    host: str | None = None,
    pop: str = "",
    exclude_defaults: bool = True,
    cfg: PollerConfig | None = None,
) -> list[bytes]:
    """One poll of the given namespaces; returns the serialized TcpInfoBatch messages."""
    if cfg is None:
        cfg = PollerConfig(
            host=host or socket.gethostname(),
            pop=pop,
            netns=tuple(netns),
            filters=FilterSpec(exclude=tuple(parse_networks(DEFAULT_EXCLUDES if exclude_defaults else ()))),
        )
    return Poller(cfg).poll().batches
