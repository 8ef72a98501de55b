"""Write TcpInfoBatch messages into the store exactly once: BatchWriter.

The same code serves the Kafka loader, `--from-file` replays and the embedded
default (chDB, no Kafka): `BatchWriter(store).write(messages)`.

One flush of a group of messages:
  1. scan every message (collector.batch_codec); undecodable ones are dead letters;
  2. drop repeats inside the group, then look the batch identities
     (host, run_id, sequence) up in the ingest_batches ledger: batches already
     there were loaded before (a redelivery after a crash) and are skipped;
  3. decode the remaining non-empty batches (bad column data -> dead letter);
  4. find per-host sequence gaps (controller.ingest_sequence);
  5. write dead letters, gaps and empty-batch ledger rows, then the rows in
     ONE insert (one block), whose ledger rows the materialized view writes.
Every step is idempotent, so a failed flush (StoreError) is retried whole by
the caller; the caller commits its Kafka offsets only after flush() returned.
See docs/ingest.md for why this never duplicates rows.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collector.batch_codec import BatchDecodeError, ScannedBatch, decode_all, scan_batch
from controller import sql_params
from controller.ingest_columns import Prepared, prepare, to_insert_columns
from controller.ingest_metrics import IngestMetrics
from controller.ingest_sequence import Gap, Key, SeenBatch, SequenceTracker
from controller.store import ClickHouseStore, Store, StoreError

log = logging.getLogger("dyncc.ingest")

TABLE = "tcpinfo"


@dataclass(slots=True)
class Incoming:
    """One message and where it came from (for dead letters)."""

    value: bytes
    topic: str = ""
    partition: int = -1
    offset: int = -1
    scanned: ScannedBatch | None = None
    error: str | None = None

    @property
    def rows(self) -> int:
        return self.scanned.rows if self.scanned is not None else 0


@dataclass
class FlushResult:
    messages: int = 0
    rows: int = 0
    batches: int = 0
    empty: int = 0
    duplicates: int = 0
    dead_letters: list[tuple[Incoming, str]] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    seconds: float = 0.0
    prepare_seconds: float = 0.0
    insert_seconds: float = 0.0

    def summary(self) -> str:
        missing = sum(g.missing for g in self.gaps)
        return (
            f"{self.messages} messages: {self.rows} rows in {self.batches} batches "
            f"({self.empty} empty), {self.duplicates} already loaded, "
            f"{len(self.dead_letters)} dead letters, {len(self.gaps)} gaps ({missing} batches missing); "
            f"prepare {self.prepare_seconds * 1000:.0f} ms, insert {self.insert_seconds * 1000:.0f} ms"
        )


@dataclass
class PreparedFlush:
    """A flush whose CPU work is done and whose store writes are not (BatchWriter.commit)."""

    result: FlushResult
    columns: Prepared | None
    empty: list[ScannedBatch]
    updates: dict[Key, int]
    identities: set[tuple[str, int, int]]
    prepare_seconds: float
    block: Any = None  # controller.ingest_native.NativeBlock, serialized on the preparing thread


def _now() -> int:
    return int(time.time())


class BatchWriter:
    """Exactly-once writer of serialized TcpInfoBatch messages into one store."""

    def __init__(
        self,
        store: Store,
        *,
        metrics: IngestMetrics | None = None,
        source: str = "inproc",
        native: bool = True,
    ) -> None:
        self.store = store
        self.metrics = metrics or IngestMetrics()
        self.source = source
        self.tracker = SequenceTracker()
        self._counter = 0
        # Native-protocol connections for the row inserts, one per concurrent insert (a
        # pipelining caller may have several in flight; a driver connection is not shared).
        self._native = native and isinstance(store, ClickHouseStore)
        self._idle: list[Any] = []
        self._connections: list[Any] = []
        self._pool_lock = threading.Lock()
        self._revision: int | None = None
        self._block_ok = True

    # ------------------------------------------------------------ public

    def write(self, messages: Iterable[bytes]) -> FlushResult:
        """In-process path: load serialized batches (e.g. straight from a collector)."""
        items = []
        for value in messages:
            items.append(Incoming(bytes(value), self.source, -1, self._counter))
            self._counter += 1
        return self.flush(items)

    @staticmethod
    def prescan(item: Incoming) -> None:
        """Scan a message as it arrives (spreads the work; flush() reuses the result)."""
        if item.scanned is None and item.error is None:
            try:
                item.scanned = scan_batch(item.value)
            except BatchDecodeError as exc:
                item.error = str(exc)

    def flush(self, items: Sequence[Incoming]) -> FlushResult:
        """Load a group of messages; raises StoreError (nothing acknowledged) when the store fails."""
        return self.commit(self.prepare(items))

    def prepare(self, items: Sequence[Incoming], pending: Sequence[PreparedFlush] = ()) -> PreparedFlush:
        """The CPU part of a flush: scan, dedup against the ledger, decode, gaps, columns.

        `pending` are prepared flushes not yet committed (a pipelining caller's
        in-flight insert): their batches count as loaded and their sequence
        state as current.  If one of them fails, prepare this group again.
        """
        t0 = time.monotonic()
        result = FlushResult(messages=len(items))
        scanned: list[tuple[Incoming, ScannedBatch]] = []
        for item in items:
            self.prescan(item)
            if item.scanned is not None:
                scanned.append((item, item.scanned))
            else:
                result.dead_letters.append((item, item.error or "undecodable"))
        unique: list[tuple[Incoming, ScannedBatch]] = []
        seen: set[tuple[str, int, int]] = set()
        for p in pending:
            seen |= p.identities
        for item, batch in scanned:
            if batch.identity in seen:
                result.duplicates += 1
            else:
                seen.add(batch.identity)
                unique.append((item, batch))
        present = self._ledger_lookup([b.identity for _, b in unique])
        todo = [(item, b) for item, b in unique if b.identity not in present]
        result.duplicates += len(unique) - len(todo)
        nonempty = [(item, b) for item, b in todo if b.rows]
        empty = [b for _, b in todo if not b.rows]
        group, bad = decode_all([b for _, b in nonempty])
        for index, reason in sorted(bad.items()):
            result.dead_letters.append((nonempty[index][0], reason))
        bad_ids = {nonempty[i][1].identity for i in bad}
        tracked = [
            SeenBatch(
                b.header.host,
                int(b.header.run_id),
                int(b.header.sequence),
                b.header.pop,
                int(b.header.poll_start_ns // 1_000_000_000),
            )
            for _, b in unique
            if b.identity not in bad_ids
        ]
        overlay: dict[Key, int] = {}
        for p in pending:
            overlay.update(p.updates)
        unknown = self.tracker.unknown(tracked) - overlay.keys()
        baseline = self._ledger_max(unknown) if unknown else {}
        baseline.update(overlay)
        gaps, updates = self.tracker.plan(tracked, baseline, override=overlay)
        result.gaps = gaps
        columns: Prepared | None = None
        block: Any = None
        rows = 0
        if any(b.rows for b in group.batches):
            columns, rows = prepare(group)
            block = self._native_block(columns, rows)
        result.rows = rows
        result.empty = len(empty)
        result.batches = len(group.batches) + len(empty)
        identities = {b.identity for b in group.batches} | {b.identity for b in empty}
        return PreparedFlush(result, columns, empty, updates, identities, time.monotonic() - t0, block)

    def commit(self, prep: PreparedFlush) -> FlushResult:
        """The store part of a flush (insert), then its bookkeeping (settle)."""
        self.insert(prep)
        return self.settle(prep)

    def insert(self, prep: PreparedFlush) -> FlushResult:
        """Dead letters, gaps, empty-batch ledger rows, then the rows.  Raises StoreError.

        Safe to run for several prepared flushes at once on different threads;
        settle() them afterwards on one thread, in the order they were prepared.
        """
        t_insert = time.monotonic()
        result = prep.result
        if result.dead_letters:
            self._insert_dead_letters(result.dead_letters)
        if result.gaps:
            self._insert_gaps(result.gaps)
        if prep.empty:
            self._insert_empty(prep.empty)
        if prep.columns is not None and result.rows:
            self._insert_rows(prep.columns, result.rows, prep.block)
        result.insert_seconds = time.monotonic() - t_insert
        return result

    def settle(self, prep: PreparedFlush) -> FlushResult:
        """After insert() succeeded: sequence state, metrics and warnings for the flush."""
        result = prep.result
        self.metrics.insert_seconds.observe(result.insert_seconds)
        self.tracker.apply(prep.updates)
        result.prepare_seconds = prep.prepare_seconds
        result.seconds = prep.prepare_seconds + result.insert_seconds
        m = self.metrics
        m.rows.inc(result.rows)
        m.batches.inc(result.batches)
        m.duplicates.inc(result.duplicates)
        m.dead_letters.inc(len(result.dead_letters))
        m.gaps.inc(len(result.gaps))
        m.missing.inc(sum(g.missing for g in result.gaps))
        for item, reason in result.dead_letters:
            log.warning(
                "dead letter %s[%d]@%d (%d bytes): %s",
                item.topic,
                item.partition,
                item.offset,
                len(item.value),
                reason,
            )
        for g in result.gaps:
            log.warning(
                "sequence gap: host %s run %d missing batches %d..%d (%d)",
                g.host,
                g.run_id,
                g.from_sequence,
                g.to_sequence,
                g.missing,
            )
        return result

    def close(self) -> None:
        with self._pool_lock:
            connections, self._connections, self._idle = self._connections, [], []
        for client in connections:
            client.disconnect()

    def _checkout(self) -> Any:
        with self._pool_lock:
            if self._idle:
                return self._idle.pop()
        from controller.ingest_native import native_client

        assert isinstance(self.store, ClickHouseStore)
        client = native_client(self.store.url)
        with self._pool_lock:
            self._connections.append(client)
        return client

    def _checkin(self, client: Any) -> None:
        with self._pool_lock:
            if client in self._connections:
                self._idle.append(client)

    # ------------------------------------------------------------ ledger

    def _ledger_lookup(self, identities: list[tuple[str, int, int]]) -> set[tuple[str, int, int]]:
        if not identities:
            return set()
        ranges: dict[Key, list[int]] = {}
        for host, run_id, seq in identities:
            r = ranges.setdefault((host, run_id), [seq, seq])
            r[0] = min(r[0], seq)
            r[1] = max(r[1], seq)
        conds = " OR ".join(
            f"(host = {sql_params.quote(h)} AND run_id = {run} AND sequence >= {lo} AND sequence <= {hi})"
            for (h, run), (lo, hi) in ranges.items()
        )
        hosts = ", ".join(sql_params.quote(h) for h in {h for h, _ in ranges})
        rows = self.store.query_rows(
            f"SELECT DISTINCT host, run_id, sequence FROM ingest_batches WHERE host IN ({hosts}) AND ({conds})"
        )
        found = {(str(h), int(r), int(s)) for h, r, s in rows}
        return found & set(identities)

    def _ledger_max(self, keys: set[Key]) -> dict[Key, int]:
        hosts = ", ".join(sql_params.quote(h) for h in {h for h, _ in keys})
        rows = self.store.query_rows(
            f"SELECT host, run_id, max(sequence) FROM ingest_batches WHERE host IN ({hosts}) GROUP BY host, run_id"
        )
        out = {(str(h), int(r)): int(s) for h, r, s in rows}
        return {k: v for k, v in out.items() if k in keys}

    # ------------------------------------------------------------ writes

    def _insert_dead_letters(self, dead: list[tuple[Incoming, str]]) -> None:
        n = len(dead)
        self.store.insert_columns(
            "ingest_dead_letter",
            {
                "time": np.full(n, _now(), dtype=np.uint32),
                "topic": np.array([i.topic for i, _ in dead], dtype=object),
                "partition": np.array([i.partition for i, _ in dead], dtype=np.int32),
                "offset": np.array([i.offset for i, _ in dead], dtype=np.int64),
                "error": np.array([r for _, r in dead], dtype=object),
                "raw": np.array([i.value for i, _ in dead] + [b""], dtype=object)[:n],
            },
        )

    def _insert_gaps(self, gaps: list[Gap]) -> None:
        n = len(gaps)
        self.store.insert_columns(
            "ingest_sequence_gaps",
            {
                "detected_at": np.full(n, _now(), dtype=np.uint32),
                "time": np.array([g.time for g in gaps], dtype=np.uint32),
                "pop": np.array([g.pop for g in gaps], dtype=object),
                "host": np.array([g.host for g in gaps], dtype=object),
                "run_id": np.array([g.run_id for g in gaps], dtype=np.uint64),
                "from_sequence": np.array([g.from_sequence for g in gaps], dtype=np.uint64),
                "to_sequence": np.array([g.to_sequence for g in gaps], dtype=np.uint64),
                "missing": np.array([g.missing for g in gaps], dtype=np.uint64),
            },
        )

    def _insert_empty(self, batches: list[ScannedBatch]) -> None:
        n = len(batches)
        self.store.insert_columns(
            "ingest_batches",
            {
                "inserted_at": np.full(n, _now(), dtype=np.uint32),
                "batch_time": np.array([b.header.poll_start_ns // 1_000_000_000 for b in batches], dtype=np.uint32),
                "host": np.array([b.header.host for b in batches], dtype=object),
                "run_id": np.array([b.header.run_id for b in batches], dtype=np.uint64),
                "sequence": np.array([b.header.sequence for b in batches], dtype=np.uint64),
                "rows": np.zeros(n, dtype=np.uint64),
            },
        )

    def _native_block(self, columns: Prepared, rows: int) -> Any:
        """Serialize the rows for the native insert now (on the preparing thread), if possible."""
        if not self._native or not self._block_ok:
            return None
        from clickhouse_driver import errors as ch_errors

        from controller.ingest_columns import TCPINFO_TYPES
        from controller.ingest_native import serialize_block

        if self._revision is None:
            client = self._checkout()
            try:
                self._revision = client.revision()
            except (ch_errors.Error, OSError, EOFError):
                return None  # the insert itself reports the store being down
            finally:
                self._checkin(client)
        return serialize_block(columns, rows, TCPINFO_TYPES, self._revision)

    def _insert_rows(self, prepared: Prepared, rows: int, block: Any = None) -> None:
        if self._native:
            from controller.ingest_native import NativeColumns, SchemaMismatch

            if block is not None and self._block_ok:
                try:
                    self._native_insert(block, list(prepared))
                    return
                except SchemaMismatch as exc:
                    log.warning("pre-serialized insert not possible (%s); serializing per server types", exc)
                    self._block_ok = False
            try:
                self._native_insert(NativeColumns(prepared, rows), list(prepared))
                return
            except SchemaMismatch as exc:
                log.warning("native insert not possible (%s); using the driver's insert from now on", exc)
                self._native = False
                self.close()
        self.store.insert_columns(TABLE, to_insert_columns(prepared))

    def _native_insert(self, data: Any, columns: list[str]) -> None:
        from clickhouse_driver import errors as ch_errors

        from controller.ingest_native import SchemaMismatch

        names = ", ".join(columns)
        url = self.store.url
        client = self._checkout()
        try:
            client.execute(f"INSERT INTO {TABLE} ({names}) VALUES", [data])
        except SchemaMismatch:
            raise
        except ch_errors.ServerException as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise StoreError(f"ClickHouse error {exc.code}: {first}") from exc
        except (ch_errors.Error, OSError, EOFError) as exc:
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreError(f"ClickHouse {url.host}:{url.port} unreachable: {text}") from exc
        finally:
            self._checkin(client)
