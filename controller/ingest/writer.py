"""Write TcpInfoBatch messages into the store exactly once: BatchWriter.

The same code serves the Kafka loader, `--from-file` replays and the embedded
default (chDB, no Kafka): `BatchWriter(store).write(messages)`.

One flush of a group of messages:
  1. scan every message (schemas.tcpinfo_decode); undecodable ones and headers
     over their length limits are dead letters;
  2. drop repeats inside the group, then look the batch identities
     (host, run_id, sequence) up in the ingest_batches ledger: batches already
     there were loaded before (a redelivery after a crash) and are skipped.
     The identities go to the store as data (Store.query_rows_with), so the
     look-up statement is the same size for any number of hosts.  On a cluster
     every shard has its own ledger and gets its own rows (Store.shard_stores,
     controller/ingest/shards.py): a batch is skipped on the shards that hold it
     and loaded on the others;
  3. decode the remaining non-empty batches (bad column data -> dead letter);
  4. find per-host sequence gaps, and the batches that arrived late inside a
     recorded gap (fills: controller.ingest.sequence);
  5. write dead letters, gaps and empty-batch ledger rows, then the rows in
     ONE insert (one block), whose ledger rows the materialized view writes,
     then the fills of the batches that are now in the ledger.
Every step is idempotent, so a failed flush (StoreError) is retried whole by
the caller; the caller commits its Kafka offsets only after flush() returned.
See docs/ingest.md for why this never duplicates rows.

Store errors are told apart (dyncc_common.errors): StoreUnavailable (and
any error that is not the data's fault) propagates, the caller retries.  When
the store refuses the rows' data (StoreContentError), insert() sends the
group's batches again in halves, down to the single batches it refuses, and
dead-letters those with the store's reason (each with a gap of its own); the
rest lands.  A content error anywhere else in a flush is isolated the same way
over the group's messages (flush()).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controller.ingest.columns import TCPINFO_TYPES, Prepared, StrColumn, prepare, to_insert_columns
from controller.ingest.metrics import IngestMetrics
from controller.ingest.sequence import Fill, Gap, Key, SeenBatch, SequenceTracker, find_fills
from controller.ingest.shards import row_shards, rows_to_load, take_rows
from controller.store import Store, StoreContentError
from controller.store.sql import query
from schemas.tcpinfo_decode import BatchDecodeError, ScannedBatch, decode_all, scan_batch

log = logging.getLogger("dyncc.ingest")

TABLE = "tcpinfo"
Identity = tuple[str, int, int]


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
    filled: int = 0  # batches loaded late, inside a recorded gap (that place of the gap is closed)
    seconds: float = 0.0
    prepare_seconds: float = 0.0
    insert_seconds: float = 0.0

    def summary(self) -> str:
        missing = sum(g.missing for g in self.gaps)
        return (
            f"{self.messages} messages: {self.rows} rows in {self.batches} batches "
            f"({self.empty} empty), {self.duplicates} already loaded, "
            f"{len(self.dead_letters)} dead letters, {len(self.gaps)} gaps ({missing} batches missing), "
            f"{self.filled} late batches filled gaps; "
            f"prepare {self.prepare_seconds * 1000:.0f} ms, insert {self.insert_seconds * 1000:.0f} ms"
        )

    def add(self, other: FlushResult) -> None:
        """Add `other`'s counts to this one (totals of several flushes)."""
        self.messages += other.messages
        self.rows += other.rows
        self.batches += other.batches
        self.empty += other.empty
        self.duplicates += other.duplicates
        self.dead_letters += other.dead_letters
        self.gaps += other.gaps
        self.filled += other.filled
        self.seconds += other.seconds
        self.prepare_seconds += other.prepare_seconds
        self.insert_seconds += other.insert_seconds


@dataclass
class PreparedFlush:
    """A flush whose CPU work is done and whose store writes are not (BatchWriter.commit)."""

    result: FlushResult
    columns: Prepared | None
    empty: list[ScannedBatch]
    updates: dict[Key, int]
    identities: set[Identity]  # the batches this flush loads
    prepare_seconds: float
    block: Any = None  # controller.store.native.NativeBlock, serialized on the preparing thread
    # the non-empty batches whose rows `columns` holds, in row order (to isolate refused ones)
    loaded: list[tuple[Incoming, ScannedBatch]] = field(default_factory=list)
    # batches inside a recorded gap, written once they are in the ledger (redelivered ones too)
    fills: list[Fill] = field(default_factory=list)
    behind: set[Identity] = field(default_factory=set)  # loaded batches older than their run's last
    # rows of each batch of `loaded` in `columns` (a cluster may hold some of a batch's rows already)
    batch_rows: list[int] = field(default_factory=list)


def _fill_identity(f: Fill) -> Identity:
    return (f.gap.host, f.gap.run_id, f.sequence)


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
        # native=False: the store's plain insert_columns (the driver's / chDB's own insert)
        self._native = native
        self._pool: ThreadPoolExecutor | None = None  # a cluster's per-shard inserts

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
        """Load a group of messages; raises StoreError (nothing acknowledged) when the store fails.

        A StoreContentError (the store refuses data of some message) never leaves:
        the group is loaded in halves until the messages responsible are alone,
        and those are dead-lettered with the store's reason.
        """
        try:
            return self.commit(self.prepare(items))
        except StoreContentError as exc:
            return self._flush_isolating(items, exc)

    def _flush_isolating(self, items: Sequence[Incoming], exc: StoreContentError) -> FlushResult:
        if len(items) == 1:
            return self._dead_letter_alone(items[0], f"refused by the store: {exc}")
        log.warning("the store refused a group of %d messages (%s); loading it in halves", len(items), exc)
        total = FlushResult()
        mid = len(items) // 2
        for part in (items[:mid], items[mid:]):
            total.add(self.flush(part))
        return total

    def _dead_letter_alone(self, item: Incoming, reason: str) -> FlushResult:
        try:
            self._insert_dead_letters([(item, reason)])
        except StoreContentError as exc:  # not even its raw bytes are accepted: keep where and why
            bare = Incoming(b"", item.topic, item.partition, item.offset)
            self._insert_dead_letters([(bare, f"{reason}; raw bytes not stored: {exc}")])
        result = FlushResult(messages=1, dead_letters=[(item, reason)])
        return self.settle(PreparedFlush(result, None, [], {}, set(), 0.0))

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
        seen: set[Identity] = set()
        for p in pending:
            seen |= p.identities
        for item, batch in scanned:
            if batch.identity in seen:
                result.duplicates += 1
            else:
                seen.add(batch.identity)
                unique.append((item, batch))
        presence = self._ledger_presence([b.identity for _, b in unique])
        sharded = len(self.store.shard_stores()) > 1
        # one server: a batch in the ledger is skipped; a cluster: an empty one is, a batch with
        # rows is decoded and only its rows missing from their shards are kept (below)
        todo = [(item, b) for item, b in unique if b.identity not in presence or (sharded and b.rows)]
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
        # `behind`: batches at or below their run's last sequence.  The late ones fill a recorded
        # gap; those already loaded are included, so a fill lost to a crash after their insert
        # is written again.
        gaps, updates, behind = self.tracker.plan_behind(tracked, baseline, override=overlay)
        result.gaps = gaps
        fills = self._fills(behind, pending) if behind else []
        columns: Prepared | None = None
        block: Any = None
        rows = 0
        loaded = [(item, b) for item, b in nonempty if b.identity not in bad_ids]
        batch_rows = [b.rows for _, b in loaded]
        if any(b.rows for b in group.batches):
            columns, rows = prepare(group)
            if sharded:
                columns, batch_rows = self._unloaded(columns, loaded, batch_rows, presence)
                rows = sum(batch_rows)
                result.duplicates += sum(1 for n in batch_rows if n == 0)
                kept = [(x, n) for x, n in zip(loaded, batch_rows, strict=True) if n]
                loaded, batch_rows = [x for x, _ in kept], [n for _, n in kept]
            block = self._native_block(columns, rows) if not sharded else None
        result.rows = rows
        result.empty = len(empty)
        result.batches = len(loaded) + len(empty)
        identities = {b.identity for _, b in loaded} | {b.identity for b in empty}
        late = {(b.host, b.run_id, b.sequence) for b in behind} & identities
        return PreparedFlush(
            result, columns, empty, updates, identities, time.monotonic() - t0, block, loaded, fills, late, batch_rows
        )

    def _fills(self, behind: list[SeenBatch], pending: Sequence[PreparedFlush]) -> list[Fill]:
        """The batches of `behind` inside a recorded gap: gaps in the store and of flushes in flight."""
        keys = {(b.host, b.run_id) for b in behind}
        gaps = self._recorded_gaps(keys)
        for p in pending:
            gaps += [g for g in p.result.gaps if (g.host, g.run_id) in keys]
        return find_fills(behind, gaps)

    def commit(self, prep: PreparedFlush) -> FlushResult:
        """The store part of a flush (insert), then its bookkeeping (settle)."""
        self.insert(prep)
        return self.settle(prep)

    def insert(self, prep: PreparedFlush) -> FlushResult:
        """Dead letters, gaps, empty-batch ledger rows, the rows, then the fills.  Raises StoreError.

        Rows the store refuses (StoreContentError) do not raise: the batches
        responsible are found and dead-lettered (_isolate), the rest lands.
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
            try:
                self._insert_rows(prep.columns, result.rows, prep.block)
            except StoreContentError as exc:
                self._isolate(prep, exc)
        if prep.fills:  # after the rows: a fill says the batch is in the ledger
            self._insert_fills(prep.fills)
        # the rows landed: free their columns now, not when the flush is settled (in order)
        prep.columns = None
        prep.block = None
        result.filled = sum(1 for f in prep.fills if _fill_identity(f) in prep.identities)
        result.insert_seconds = time.monotonic() - t_insert
        return result

    def _isolate(self, prep: PreparedFlush, exc: StoreContentError) -> None:
        """The store refused the group's rows: load them in halves, dead-letter the refused batches.

        Every half is its own INSERT (one block); the ledger written with it keeps a
        retry after a connection error from loading a half twice.  A refused batch
        gets a dead letter with the store's reason and, unless it arrived late inside
        a gap, a gap of its own (its sequence is taken as seen).  Mutates `prep`.
        """
        assert prep.columns is not None
        loaded = prep.loaded
        batch_rows = prep.batch_rows or [b.rows for _, b in loaded]
        log.warning(
            "the store refused the rows of %d batches (%s); loading them in halves to find the ones responsible",
            len(loaded),
            exc,
        )
        # a block refused after part of it was written (a failing view, another shard) may be
        # in the ledger: only rows not there yet are sent again
        presence = self._ledger_presence([b.identity for _, b in loaded])
        columns, batch_rows = self._unloaded(prep.columns, loaded, batch_rows, presence)
        offsets = np.concatenate([[0], np.cumsum(batch_rows)]).astype(np.int64)
        todo = [i for i, n in enumerate(batch_rows) if n]
        refused: dict[int, str] = {}

        def land(idx: list[int], tried: bool, reason: str) -> None:
            if not tried:
                try:
                    self._insert_rows(*_take_rows(columns, offsets, idx))
                    return
                except StoreContentError as e:
                    reason = str(e)
            if len(idx) == 1:
                refused[idx[0]] = reason
                return
            mid = len(idx) // 2
            land(idx[:mid], False, reason)
            land(idx[mid:], False, reason)

        if todo:
            land(todo, not presence, str(exc))
        result = prep.result
        dead: list[tuple[Incoming, str]] = []
        gaps: list[Gap] = []
        for i, reason in sorted(refused.items()):
            item, b = loaded[i]
            dead.append((item, f"refused by the store: {reason}"))
            result.rows -= batch_rows[i]
            result.batches -= 1
            prep.identities.discard(b.identity)
            if b.identity not in prep.behind:
                h = b.header
                seq = int(h.sequence)
                gaps.append(Gap(h.host, int(h.run_id), h.pop, seq, seq, int(h.poll_start_ns // 1_000_000_000)))
        refused_ids = {loaded[i][1].identity for i in refused}
        prep.fills = [f for f in prep.fills if _fill_identity(f) not in refused_ids]
        if dead:
            self._insert_dead_letters(dead)
            result.dead_letters += dead
        if gaps:
            self._insert_gaps(gaps)
            result.gaps += gaps

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
        m.filled.inc(result.filled)
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
        """Stop the per-shard insert threads, if any (the store owns its connections: Store.close)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # ------------------------------------------------------------ ledger

    # The identities travel as data (an external table / chDB's Python() table): one
    # statement of fixed size for any number of hosts (ClickHouse refuses statements
    # over max_query_size, 256 KiB), and the tuple IN uses the ledger's primary key.

    def _ledger_presence(self, identities: list[Identity]) -> dict[Identity, set[int]]:
        """The identities already in the ingest_batches ledger, with the shards whose ledger has them."""
        if not identities:
            return {}
        data: dict[str, tuple[str, list[Any]]] = {
            "host": ("String", [h for h, _, _ in identities]),
            "run_id": ("UInt64", [r for _, r, _ in identities]),
            "sequence": ("UInt64", [s for _, _, s in identities]),
        }
        wanted = set(identities)
        presence: dict[Identity, set[int]] = {}
        for index, shard in enumerate(self.store.shard_stores()):
            for h, r, s in shard.query_rows_with(query("ingest_ledger_lookup"), data):
                identity = (str(h), int(r), int(s))
                if identity in wanted:
                    presence.setdefault(identity, set()).add(index)
        return presence

    def _unloaded(
        self,
        columns: Prepared,
        loaded: Sequence[tuple[Incoming, ScannedBatch]],
        batch_rows: list[int],
        presence: dict[Identity, set[int]],
    ) -> tuple[Prepared, list[int]]:
        """The rows of `columns` (batches `loaded`, `batch_rows` each) not yet in their shard's ledger."""
        shards = len(self.store.shard_stores())
        present = np.zeros((len(loaded), shards), dtype=bool)
        for i, (_, b) in enumerate(loaded):
            for s in presence.get(b.identity, ()):
                present[i, s] = True
        if not present.any():
            return columns, batch_rows
        row_batch = np.repeat(np.arange(len(loaded)), batch_rows)
        keep = rows_to_load(row_batch, row_shards(columns, self.store.shard_weights()), present)
        kept = np.bincount(row_batch[keep], minlength=len(loaded)).tolist()
        return take_rows(columns, keep), [int(n) for n in kept]

    @staticmethod
    def _runs(keys: set[Key]) -> dict[str, tuple[str, list[Any]]]:
        ordered = sorted(keys)
        return {"host": ("String", [h for h, _ in ordered]), "run_id": ("UInt64", [r for _, r in ordered])}

    def _ledger_max(self, keys: set[Key]) -> dict[Key, int]:
        """The last sequence in the ledger per (host, run_id) of `keys` (absent: none loaded).

        Read shard by shard from the replicas the rows go to (on a cluster a Distributed read
        may reach a replica still fetching the last inserts, and see gaps that are not there).
        """
        out: dict[Key, int] = {}
        for shard in self.store.shard_stores():
            for h, r, s in shard.query_rows_with(query("ingest_ledger_last"), self._runs(keys)):
                key = (str(h), int(r))
                out[key] = max(out.get(key, 0), int(s))
        return {k: v for k, v in out.items() if k in keys}

    def _recorded_gaps(self, keys: set[Key]) -> list[Gap]:
        """The gaps in ingest_sequence_gaps of the runs `keys` (filled or not)."""
        rows = self.store.query_rows_with(query("ingest_gaps_of_runs"), self._runs(keys))
        return [Gap(str(h), int(r), str(p), int(lo), int(hi), int(t)) for h, r, lo, hi, p, t in rows]

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

    def _insert_fills(self, fills: list[Fill]) -> None:
        n = len(fills)
        self.store.insert_columns(
            "ingest_gap_fills",
            {
                "filled_at": np.full(n, _now(), dtype=np.uint32),
                "time": np.array([f.gap.time for f in fills], dtype=np.uint32),
                "pop": np.array([f.gap.pop for f in fills], dtype=object),
                "host": np.array([f.gap.host for f in fills], dtype=object),
                "run_id": np.array([f.gap.run_id for f in fills], dtype=np.uint64),
                "from_sequence": np.array([f.gap.from_sequence for f in fills], dtype=np.uint64),
                "sequence": np.array([f.sequence for f in fills], dtype=np.uint64),
            },
        )

    def _insert_empty(self, batches: list[ScannedBatch]) -> None:
        n = len(batches)
        # one ledger entry, on the first shard (a cluster's Distributed ledger reads every shard)
        self.store.shard_stores()[0].insert_columns(
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
        """Serialize the rows for the store's bulk insert now (on the preparing thread), if it can."""
        return self.store.prepare_block(columns, rows, TCPINFO_TYPES) if self._native else None

    def _insert_rows(self, prepared: Prepared, rows: int, block: Any = None) -> None:
        shards = self.store.shard_stores()
        if len(shards) == 1:
            self._insert_into(self.store, prepared, rows, block)
            return
        # a cluster: each shard's rows in one insert, the shards in parallel
        row_shard = row_shards(prepared, self.store.shard_weights())
        parts = []
        for index, shard in enumerate(shards):
            mask = row_shard == index
            n = int(mask.sum())
            if n:
                parts.append((shard, take_rows(prepared, mask), n))
        if len(parts) == 1:
            self._insert_into(*parts[0])
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=len(shards), thread_name_prefix="dyncc-shard-insert")
        futures = [self._pool.submit(self._insert_into, *part) for part in parts]
        errors = [exc for exc in (f.exception() for f in futures) if exc is not None]
        if errors:  # a refusal is the data's fault (isolated by the caller); else the store's
            raise next((e for e in errors if isinstance(e, StoreContentError)), errors[0])

    def _insert_into(self, store: Store, prepared: Prepared, rows: int, block: Any = None) -> None:
        if self._native:
            store.bulk_insert(TABLE, prepared, rows, block)
        else:
            store.insert_columns(TABLE, to_insert_columns(prepared))


def _take_rows(columns: Prepared, offsets: np.ndarray, batches: list[int]) -> tuple[Prepared, int]:
    """The rows of some batches (indexes into the batches whose rows `columns` holds, in order)."""
    rows = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in batches])
    out: Prepared = {
        name: StrColumn(col.codes[rows], col.values) if isinstance(col, StrColumn) else col[rows]
        for name, col in columns.items()
    }
    return out, int(rows.shape[0])
