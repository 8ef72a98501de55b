"""One poll: dump every namespace's TCP sockets and encode them as TcpInfoBatch messages.

Parsed chunks are filtered, given client prefixes and encoded into batches as
they arrive, and each batch is handed on (`emit`) as soon as the next one
exists, so a sink can ship (and Kafka compress) while the dump is still
running, and memory follows the row cap, not the socket count.  The header
semantics that makes this possible (see schemas/tcpinfo.proto): every batch of
a namespace's poll has batch_index 0, 1, ...; only the last one carries
batch_count (the number of batches) and the namespace's totals
(sockets_seen/exported/filtered, parse_errors, poll_end_ns); earlier batches
have batch_count 0.  A poll with no rows still sends that last batch (empty).

Batches never mix namespaces; `sequence` grows by one per batch for the life of
the Poller (per host), `run_id` is its start time.  A dump flagged
NLM_F_DUMP_INTR is retried once; rows of the interrupted attempt that were
already sent are left out of the retry (by socket cookie), so no socket is
exported twice.

A Poller given a Prefetch (telemetry.prefetch: `--once` starts the kernel dump
in a helper process before numpy is imported) takes its first poll's dumps
from there; a retried dump and every later poll dump in-process.

`poll_once(...)` is the in-process entry point for the demo and tests.
"""

from __future__ import annotations

import logging
import socket
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from collector.netlink.sockdiag import (
    DEFAULT_CHUNK,
    DEFAULT_EXT,
    DEFAULT_STATES,
    TCP_STATES,
    DumpError,
    DumpTimeout,
    namespaces_to_dump,
    open_diag_socket,
    state_mask,
)
from collector.netlink.sockdiag_dump import BufferPool, DiagDumper, chunk_buffer_size
from collector.netlink.sockdiag_parse import ErrorCounts, Parsed
from collector.telemetry.filters import DEFAULT_EXCLUDES, FilterSpec, apply_filters, parse_networks
from collector.telemetry.prefetch import Prefetch
from collector.telemetry.prefixes import client_prefixes
from collector.telemetry.settings import CollectSettings, parse_states
from dyncc_common import __version__
from dyncc_common.errors import ConfigError
from schemas.tcpinfo_columns import DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS
from schemas.tcpinfo_encode import BatchHeader, BodyParts, encode_header, split_body_parts

log = logging.getLogger("dyncc.collect")


@dataclass
class PollerConfig:
    host: str = field(default_factory=socket.gethostname)
    pop: str = ""
    netns: Sequence[str] = ()  # empty: the collector's own namespace
    all_netns: bool = False
    states: Sequence[int] = tuple(TCP_STATES[s] for s in DEFAULT_STATES)
    filters: FilterSpec = field(default_factory=lambda: FilterSpec(exclude=tuple(parse_networks(DEFAULT_EXCLUDES))))
    prefix_v4: int = CollectSettings.prefix_v4
    prefix_v6: int = CollectSettings.prefix_v6
    export_addresses: str = CollectSettings.export_addresses  # "prefix": dst_addr = the client prefix
    max_rows: int = DEFAULT_MAX_ROWS
    max_bytes: int = DEFAULT_MAX_BYTES
    chunk_bytes: int = DEFAULT_CHUNK
    ext: int = DEFAULT_EXT

    @classmethod
    def from_settings(cls, cfg: CollectSettings) -> PollerConfig:
        """The poller's configuration of `dyncc collect`'s settings; ConfigError for a bad --exclude."""
        excludes = [*DEFAULT_EXCLUDES, *cfg.exclude] if cfg.default_excludes else list(cfg.exclude)
        try:
            spec = FilterSpec(
                states=frozenset(parse_states(cfg.state)),
                local_ports=frozenset(cfg.port),
                exclude=tuple(parse_networks(excludes)),
                sample_n=cfg.sample,
                min_bytes_acked=cfg.min_bytes_acked,
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return cls(
            host=cfg.host,
            pop=cfg.pop,
            netns=tuple(cfg.netns),
            all_netns=cfg.all_netns,
            states=tuple(sorted(set(parse_states(cfg.state)))),
            filters=spec,
            prefix_v4=cfg.prefix_v4,
            prefix_v6=cfg.prefix_v6,
            export_addresses=cfg.export_addresses,
            max_rows=cfg.max_rows,
            max_bytes=cfg.max_bytes,
        )


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
    """What one poll did.  `batches` holds the messages only when no `emit` callback took them."""

    batches: list[bytes]
    start_ns: int
    end_ns: int
    namespaces: list[NetnsStats]
    failed_netns: dict[str, str] = field(default_factory=dict)
    sent_batches: int = 0
    sent_bytes: int = 0

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
        return self.sent_bytes


Body = tuple[int, BodyParts]  # (row_count, encoded column fields as parts: joined with the header)


class Encoder:
    """Filters parsed chunks of one dump attempt and turns them into batch bodies (`out`)."""

    def __init__(
        self,
        cfg: PollerConfig,
        cc_names: list[str],
        out: Callable[[int, BodyParts], None],
        exclude: np.ndarray | None = None,
    ) -> None:
        self.cfg = cfg
        self.cc_names = cc_names
        self.out = out
        self.exclude = exclude  # cookies already sent by an interrupted attempt
        self.seen = 0
        self.exported = 0
        self.sent_rows = 0
        self.sent_cookies: list[np.ndarray] = []
        self.filtered: Counter[str] = Counter()
        self.pending: list[dict[str, np.ndarray]] = []
        self.pending_rows = 0

    def __call__(self, parsed: Parsed) -> None:
        cols = parsed.columns
        self.seen += parsed.rows
        if not parsed.rows:
            return
        # remap chunk-local cc indexes into the namespace's table
        remap = np.array([self._cc(name) for name in parsed.cc_names], dtype=np.uint32)
        cols["cc_index"] = remap[cols["cc_index"]]
        keep = apply_filters(cols, self.cfg.filters, self.filtered)
        if self.exclude is not None and self.exclude.size:
            keep &= ~np.isin(cols["cookie"], self.exclude)
        if not keep.all():
            cols = {k: v[keep] for k, v in cols.items()}
        rows = int(cols["state"].shape[0])
        if not rows:
            return
        prefix, plen = client_prefixes(cols["dst_addr"], self.cfg.prefix_v4, self.cfg.prefix_v6)
        cols["client_prefix"] = prefix
        cols["client_prefix_len"] = plen
        if self.cfg.export_addresses == "prefix":  # host bits zeroed: no client's own address is encoded
            cols["dst_addr"] = prefix
        self.exported += rows
        self.pending.append(cols)
        self.pending_rows += rows
        if self.pending_rows >= self.cfg.max_rows:
            self.flush()

    def _cc(self, name: str) -> int:
        if name not in self.cc_names:
            self.cc_names.append(name)
        return self.cc_names.index(name)

    def flush(self) -> None:
        """Encode everything pending (rows spread evenly over the batches) and hand the bodies on."""
        if not self.pending:
            return
        if len(self.pending) == 1:
            merged = self.pending[0]
        else:
            merged = {k: np.concatenate([p[k] for p in self.pending]) for k in self.pending[0]}
        self.pending, self.pending_rows = [], 0
        for rows, body in split_body_parts(merged, self.cfg.max_rows, self.cfg.max_bytes):
            self.out(rows, body)
        self.sent_rows += int(merged["cookie"].shape[0])
        self.sent_cookies.append(merged["cookie"])


class _Batcher:
    """Headers for one namespace's bodies: sends each body once the next exists; the last gets the totals."""

    def __init__(self, poller: Poller, netns: str, start_ns: int, emit: Callable[[bytes], None]) -> None:
        self.poller = poller
        self.netns = netns
        self.start_ns = start_ns
        self.emit = emit
        self.cc_names: list[str] = [""]
        self.held: Body | None = None
        self.index = 0

    def body(self, rows: int, body: BodyParts) -> None:
        if self.held is not None:
            self._send(self.held, None)
        self.held = (rows, body)

    def finish(self, stats: NetnsStats, end_ns: int) -> None:
        """Send the last batch (the held body, or an empty one) with the namespace's totals."""
        held, self.held = self.held or (0, []), None
        self._send(held, (stats, end_ns))

    def _send(self, body: Body, final: tuple[NetnsStats, int] | None) -> None:
        cfg = self.poller.cfg
        header = BatchHeader(
            host=cfg.host,
            pop=cfg.pop,
            netns=self.netns,
            run_id=self.poller.run_id,
            poll_start_ns=self.start_ns,
            cc_names=list(self.cc_names),
            client_prefix_len_v4=cfg.prefix_v4,
            client_prefix_len_v6=cfg.prefix_v6,
            collector_version=__version__,
        )
        if final is not None:
            stats, header.poll_end_ns = final
            header.sockets_seen = stats.seen
            header.sockets_exported = stats.exported
            header.sockets_filtered = sum(stats.filtered.values())
            header.parse_errors = {k: v for k, v in stats.errors.items() if v}
        rows, data = body
        head = encode_header(
            header,
            sequence=self.poller.sequence,
            batch_index=self.index,
            batch_count=self.index + 1 if final is not None else 0,
            row_count=rows,
        )
        self.poller.sequence += 1
        self.index += 1
        self.emit(b"".join([head, *data]))  # the one copy of the body (split_body_parts)


def list_namespaces(cfg: PollerConfig) -> list[str]:
    """Namespaces to dump this poll ('' = the collector's own)."""
    return namespaces_to_dump(cfg.netns, cfg.all_netns)


class Poller:
    """Keeps the per-host sequence and run_id across polls."""

    def __init__(self, cfg: PollerConfig, run_id: int | None = None, prefetch: Prefetch | None = None) -> None:
        self.cfg = cfg
        self.run_id = time.time_ns() if run_id is None else run_id
        self.sequence = 0
        self._states = state_mask(tuple(cfg.states))
        self._pool = BufferPool(chunk_buffer_size(cfg.chunk_bytes))  # reused by every dump
        self._prefetch = prefetch  # dumps started before this poll (telemetry.prefetch), first poll only

    def poll(self, deadline: float | None = None, emit: Callable[[bytes], None] | None = None) -> PollResult:
        """Dump all namespaces, handing each batch to `emit` as soon as it is final.

        Without `emit` the batches are collected in the result.  Raises
        DumpTimeout when the deadline passes (batches already emitted stay sent).
        """
        prefetch, self._prefetch = self._prefetch, None
        start_ns = time.time_ns() if prefetch is None else prefetch.started_ns
        try:
            return self._poll(start_ns, prefetch, deadline, emit)
        finally:
            if prefetch is not None:
                prefetch.close()

    def _poll(
        self,
        start_ns: int,
        prefetch: Prefetch | None,
        deadline: float | None,
        emit: Callable[[bytes], None] | None,
    ) -> PollResult:
        result = PollResult(batches=[], start_ns=start_ns, end_ns=start_ns, namespaces=[])

        def send(data: bytes) -> None:
            result.sent_batches += 1
            result.sent_bytes += len(data)
            if emit is None:
                result.batches.append(data)
            else:
                emit(data)

        for ns in list_namespaces(self.cfg):
            batcher = _Batcher(self, ns, start_ns, send)
            stats = NetnsStats(netns=ns)
            try:
                self._dump_netns(ns, deadline, batcher, stats, prefetch)
            except DumpTimeout:
                raise
            except DumpError as exc:
                result.failed_netns[ns] = str(exc)
                log.warning("netns %s: %s", ns or "(own)", exc)
                if batcher.index == 0 and batcher.held is None:
                    continue  # nothing of this namespace was sent
                stats.errors["dump_failed"] += 1
            batcher.finish(stats, time.time_ns())
            result.namespaces.append(stats)
        result.end_ns = time.time_ns()
        return result

    def _dump_netns(
        self, ns: str, deadline: float | None, batcher: _Batcher, stats: NetnsStats, prefetch: Prefetch | None
    ) -> None:
        dumper: DiagDumper | None = None
        try:
            if prefetch is None:
                dumper = self._dumper(ns)  # the socket opens (or fails) before anything is dumped
            for family in (socket.AF_INET, socket.AF_INET6):
                exclude: np.ndarray | None = None
                for attempt in (0, 1):
                    enc = Encoder(self.cfg, batcher.cc_names, batcher.body, exclude)
                    errors = ErrorCounts()
                    job = None
                    if attempt == 0 and prefetch is not None:
                        job = prefetch.take(ns, family, self._states, self.cfg.ext)
                    if job is not None:
                        assert prefetch is not None
                        res = prefetch.dump(job, enc, errors, deadline)
                    else:
                        if dumper is None:
                            dumper = self._dumper(ns)
                        res = dumper.dump(family, self._states, enc, errors, ext=self.cfg.ext, deadline=deadline)
                    stats.errors.update(errors)
                    if res.interrupted and attempt == 0:
                        # rows already sent stay sent; the retry leaves those sockets out
                        stats.retried = True
                        stats.exported += enc.sent_rows
                        if enc.sent_cookies:
                            exclude = np.concatenate(enc.sent_cookies)
                        continue
                    break
                enc.flush()
                stats.seen += enc.seen
                stats.exported += enc.exported
                stats.filtered.update(enc.filtered)
        finally:
            if dumper is not None:
                dumper.close()

    def _dumper(self, ns: str) -> DiagDumper:
        try:
            sock = open_diag_socket(ns or None)
        except OSError as exc:
            raise DumpError(f"cannot open a sock_diag socket: {exc}") from exc
        return DiagDumper(sock, self.cfg.chunk_bytes, pool=self._pool)


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
