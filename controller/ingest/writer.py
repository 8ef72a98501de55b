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
  3. check the values the decoder refuses (cc_index, client_prefix_len: bad
     column data -> dead letter) from those two columns alone;
  4. find per-host sequence gaps, and the batches that arrived late inside a
     recorded gap (fills: controller.ingest.sequence);
  5. write dead letters, gaps and empty-batch ledger rows, then the rows in
     slices: consecutive whole batches of at most `slice_rows` rows, each sent
     as ONE insert whose ledger rows the materialized view writes; then the
     fills of the batches that are now in the ledger.  On one ClickHouse server
     a slice's INSERT carries Native blocks of at most `block_rows` rows (whole
     batches), each decoded and serialized while the INSERT is open and freed
     once sent (BlockColumns); the server squashes them into one part as it
     would one block.  Elsewhere (chDB, a cluster, native=False) a slice is
     decoded whole and sent as one block.
Only one block's (else one slice's) columns are alive per insert thread,
whatever the group's size; the group's messages are held until it is written,
except those of slices that landed (Incoming.landed: their bytes are let go).
Every step is idempotent, so a failed flush (StoreError) is retried whole by
the caller; the caller commits its Kafka offsets only after flush() returned.
A slice boundary is a batch boundary, so a batch's rows and its ledger row are
in one block: a retry after a failure (or a crash) between two slices' inserts
skips the batches of the slices that landed (this writer's own record, else
the ledger) and loads the rest.  See docs/ingest.md for why this never
duplicates rows.

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
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controller.ingest.columns import TCPINFO_TYPES, Prepared, StrColumn, prepare, to_insert_columns
from controller.ingest.metrics import IngestMetrics
from controller.ingest.sequence import Fill, Gap, Key, SeenBatch, SequenceTracker, find_fills
from controller.ingest.settings import IngestSettings
from controller.ingest.shards import row_shards, rows_to_load, take_rows
from controller.store import Store, StoreContentError
from controller.store.columns import BlockColumns
from controller.store.sql import query
from schemas.tcpinfo_columns import COLUMN_DTYPES, COLUMNS
from schemas.tcpinfo_decode import MAX_PREFIX_LEN, BatchDecodeError, ScannedBatch, decode_all, scan_batch

log = logging.getLogger("dyncc.ingest")

TABLE = "tcpinfo"
Identity = tuple[str, int, int]
#: rows of one insert at most (whole batches; a larger batch goes alone): the `--slice-rows` default
SLICE_ROWS: int = IngestSettings.defaults()["slice_rows"]
#: rows of one Native block of a streamed insert at most (whole batches): the `--block-rows` default
BLOCK_ROWS: int = IngestSettings.defaults()["block_rows"]


@dataclass(slots=True)
class Incoming:
    """One message and where it came from (for dead letters)."""

    value: bytes
    topic: str = ""
    partition: int = -1
    offset: int = -1
    scanned: ScannedBatch | None = None
    error: str | None = None
    # its rows were inserted by this writer (a slice of its group landed): a retry of the group
    # counts it as already loaded without asking the ledger, and its bytes are let go
    # (value and scanned.data are empty)
    landed: bool = False

    @property
    def rows(self) -> int:
        return self.scanned.rows if self.scanned is not None else 0

    def release(self) -> None:
        """Its rows landed: mark it and let go of its bytes (kept: header, offsets, row count)."""
        self.landed = True
        self.value = b""
        if self.scanned is not None:
            self.scanned.data = b""
            self.scanned.columns = None


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
    """A flush whose look-ups and checks are done and whose store writes are not (BatchWriter.commit).

    The rows are not decoded yet: insert() decodes them slice by slice.
    """

    result: FlushResult
    empty: list[ScannedBatch] = field(default_factory=list)
    updates: dict[Key, int] = field(default_factory=dict)
    identities: set[Identity] = field(default_factory=set)  # the batches this flush loads
    prepare_seconds: float = 0.0
    # the non-empty batches to load, in order (insert() cuts them into slices)
    loaded: list[tuple[Incoming, ScannedBatch]] = field(default_factory=list)
    # batches inside a recorded gap, written once they are in the ledger (redelivered ones too)
    fills: list[Fill] = field(default_factory=list)
    behind: set[Identity] = field(default_factory=set)  # loaded batches older than their run's last
    # a cluster: the shards whose ledger holds each batch of `loaded` (its rows there are not sent)
    presence: dict[Identity, set[int]] = field(default_factory=dict)


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
        slice_rows: int = SLICE_ROWS,
        block_rows: int = BLOCK_ROWS,
    ) -> None:
        if slice_rows < 1:
            raise ValueError(f"slice_rows must be at least 1, not {slice_rows}")
        if block_rows < 1:
            raise ValueError(f"block_rows must be at least 1, not {block_rows}")
        self.store = store
        self.slice_rows = slice_rows
        self.block_rows = block_rows
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
        return self.settle(PreparedFlush(result))

    def prepare(self, items: Sequence[Incoming], pending: Sequence[PreparedFlush] = ()) -> PreparedFlush:
        """The look-ups of a flush: scan, dedup against the ledger, value checks, gaps (no decoding).

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
        # batches a slice of an earlier attempt of this flush landed: already loaded, as if the
        # ledger said so (it does), without asking it
        fresh = [(item, b) for item, b in unique if not item.landed]
        presence = self._ledger_presence([b.identity for _, b in fresh])
        sharded = len(self.store.shard_stores()) > 1
        # one server: a batch in the ledger is skipped; a cluster: an empty one is, a batch with
        # rows is decoded and only its rows missing from their shards are sent (insert())
        todo = [(item, b) for item, b in fresh if b.identity not in presence or (sharded and b.rows)]
        result.duplicates += len(unique) - len(todo)
        nonempty = [(item, b) for item, b in todo if b.rows]
        empty = [b for _, b in todo if not b.rows]
        bad = _value_errors([b for _, b in nonempty])
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
        loaded = [(item, b) for item, b in nonempty if b.identity not in bad_ids]
        # on a cluster a batch's rows some shards hold already are taken off when its slice is decoded
        result.rows = sum(b.rows for _, b in loaded)
        result.empty = len(empty)
        result.batches = len(loaded) + len(empty)
        identities = {b.identity for _, b in loaded} | {b.identity for b in empty}
        late = {(b.host, b.run_id, b.sequence) for b in behind} & identities
        return PreparedFlush(
            result,
            empty=empty,
            updates=updates,
            identities=identities,
            prepare_seconds=time.monotonic() - t0,
            loaded=loaded,
            fills=fills,
            behind=late,
            presence={i: presence[i] for _, b in loaded if (i := b.identity) in presence} if sharded else {},
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
        """Dead letters, gaps, empty-batch ledger rows, the rows slice by slice, then the fills.

        Raises StoreError; the slices sent before it stay (their batches are in the
        ledger, and their messages are marked landed: a retry skips them).  Rows the
        store refuses (StoreContentError) do not raise: the batches responsible are
        found and dead-lettered (_isolate), the rest lands.  Safe to run for several
        prepared flushes at once on different threads; settle() them afterwards on
        one thread, in the order they were prepared.
        """
        t_insert = time.monotonic()
        result = prep.result
        if result.dead_letters:
            self._insert_dead_letters(result.dead_letters)
        if result.gaps:
            self._insert_gaps(result.gaps)
        if prep.empty:
            self._insert_empty(prep.empty)
        for lo, hi in slice_bounds([b.rows for _, b in prep.loaded], self.slice_rows):
            self._insert_slice(prep, prep.loaded[lo:hi])
        if prep.fills:  # after the rows: a fill says the batch is in the ledger
            self._insert_fills(prep.fills)
        result.filled = sum(1 for f in prep.fills if _fill_identity(f) in prep.identities)
        result.insert_seconds = time.monotonic() - t_insert
        return result

    def _streams(self) -> bool:
        """Whether a slice goes as one INSERT of blocks decoded one at a time (one server, the Native insert)."""
        return self._native and len(self.store.shard_stores()) == 1

    def _insert_slice(self, prep: PreparedFlush, part: list[tuple[Incoming, ScannedBatch]]) -> None:
        """Insert the rows of some consecutive batches (one INSERT), then let go of their messages."""
        if not self._streams() or prep.presence:
            self._insert_slice_whole(prep, part)
            return
        bad: dict[int, str] = {}  # index into `part` -> the decoder's reason
        bounds = slice_bounds([b.rows for _, b in part], self.block_rows)

        def blocks() -> Iterator[tuple[Prepared, int]]:
            for lo, hi in bounds:
                group, refused = decode_all([b for _, b in part[lo:hi]])
                for i, reason in refused.items():
                    bad[lo + i] = reason
                if any(b.rows for b in group.batches):
                    columns, rows = prepare(group)
                    del group
                    yield columns, rows
                    del columns  # before the next block is decoded: one block alive at a time

        rows = sum(b.rows for _, b in part)
        try:
            self.store.bulk_insert(TABLE, BlockColumns(list(TCPINFO_TYPES), rows, blocks, TCPINFO_TYPES), rows)
        except StoreContentError as exc:  # find the batches responsible on the whole slice
            self._insert_slice_whole(prep, part, refused_with=exc)
            return
        if bad:  # values _value_errors let through: the decoder is the authority (left out of the blocks)
            self._refuse(prep, [(*part[i], part[i][1].rows, reason) for i, reason in sorted(bad.items())])
        for i, (item, _) in enumerate(part):
            if i not in bad:
                item.release()

    def _insert_slice_whole(
        self,
        prep: PreparedFlush,
        part: list[tuple[Incoming, ScannedBatch]],
        refused_with: StoreContentError | None = None,
    ) -> None:
        """Decode, serialize and insert the rows of some consecutive batches as one block, then free them.

        `refused_with`: the store refused these rows already (a streamed insert): go straight to
        finding the batches responsible.
        """
        result = prep.result
        group, bad = decode_all([b for _, b in part])
        if bad:  # values _value_errors let through: the decoder is the authority
            self._refuse(prep, [(*part[i], part[i][1].rows, reason) for i, reason in sorted(bad.items())])
            part = [x for i, x in enumerate(part) if i not in bad]
        if not part:
            return
        columns, rows = prepare(group)
        del group
        batch_rows = [b.rows for _, b in part]
        if prep.presence:  # a cluster: only the rows missing from their shards
            columns, batch_rows = self._unloaded(columns, part, batch_rows, prep.presence)
            for (_, b), n in zip(part, batch_rows, strict=True):
                result.rows -= b.rows - n
                if not n:  # every shard has it already
                    result.duplicates += 1
                    result.batches -= 1
                    prep.identities.discard(b.identity)
            kept = [(x, n) for x, n in zip(part, batch_rows, strict=True) if n]
            part, batch_rows = [x for x, _ in kept], [n for _, n in kept]
            rows = sum(batch_rows)
        refused: set[int] = set()
        if rows and refused_with is not None:
            refused = self._isolate(prep, columns, part, batch_rows, refused_with)
        elif rows:
            block = self._native_block(columns, rows) if len(self.store.shard_stores()) == 1 else None
            try:
                self._insert_rows(columns, rows, block)
            except StoreContentError as exc:
                refused = self._isolate(prep, columns, part, batch_rows, exc)
            del block
        del columns
        for i, (item, _) in enumerate(part):
            if i not in refused:
                item.release()

    def _isolate(
        self,
        prep: PreparedFlush,
        columns: Prepared,
        loaded: list[tuple[Incoming, ScannedBatch]],
        batch_rows: list[int],
        exc: StoreContentError,
    ) -> set[int]:
        """The store refused a slice's rows: load them in halves, dead-letter the refused batches.

        `columns` holds the rows of the batches `loaded`, `batch_rows` each.  Every
        half is its own INSERT (one block); the ledger written with it keeps a retry
        after a connection error from loading a half twice.  A refused batch gets a
        dead letter with the store's reason and, unless it arrived late inside a gap,
        a gap of its own (its sequence is taken as seen).  Mutates `prep`; returns
        the indexes (into `loaded`) of the refused batches.
        """
        log.warning(
            "the store refused the rows of %d batches (%s); loading them in halves to find the ones responsible",
            len(loaded),
            exc,
        )
        # a block refused after part of it was written (a failing view, another shard) may be
        # in the ledger: only rows not there yet are sent again
        presence = self._ledger_presence([b.identity for _, b in loaded])
        columns, batch_rows = self._unloaded(columns, loaded, batch_rows, presence)
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
        self._refuse(
            prep,
            [(*loaded[i], batch_rows[i], f"refused by the store: {reason}") for i, reason in sorted(refused.items())],
        )
        return set(refused)

    def _refuse(self, prep: PreparedFlush, refused: list[tuple[Incoming, ScannedBatch, int, str]]) -> None:
        """Batches not loaded (item, batch, its rows counted in the result, reason): dead letters, own gaps."""
        if not refused:
            return
        result = prep.result
        dead: list[tuple[Incoming, str]] = []
        gaps: list[Gap] = []
        for item, b, rows, reason in refused:
            dead.append((item, reason))
            result.rows -= rows
            result.batches -= 1
            prep.identities.discard(b.identity)
            if b.identity not in prep.behind:
                h = b.header
                seq = int(h.sequence)
                gaps.append(Gap(h.host, int(h.run_id), h.pop, seq, seq, int(h.poll_start_ns // 1_000_000_000)))
        refused_ids = {b.identity for _, b, _, _ in refused}
        prep.fills = [f for f in prep.fills if _fill_identity(f) not in refused_ids]
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
        self._insert_small(
            self.store,
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
        self._insert_small(
            self.store,
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
        self._insert_small(
            self.store,
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
        self._insert_small(
            self.store.shard_stores()[0],
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

    def _insert_small(self, store: Store, table: str, columns: dict[str, np.ndarray]) -> None:
        """A few rows of the loader's own tables: the Native insert (no pandas on a server's
        connection: docs/performance.md), or with native=False the store's plain insert."""
        if self._native:
            store.bulk_insert(table, columns, len(next(iter(columns.values()))))
        else:
            store.insert_columns(table, columns)

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


def slice_bounds(batch_rows: Sequence[int], limit: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges of consecutive batches with at most `limit` rows each, of about equal rows.

    A batch of more than `limit` rows goes alone.  Pure.
    """
    total = sum(batch_rows)
    if not batch_rows:
        return []
    if total <= limit:
        return [(0, len(batch_rows))]
    ends = np.cumsum(np.asarray(batch_rows, dtype=np.int64))
    k = -(-total // limit)
    while True:
        # cut at the batch boundary nearest to each j * total / k
        targets = np.arange(1, k, dtype=np.float64) * (total / k)
        after = np.searchsorted(ends, targets)  # the batch holding each target
        nearer_before = (after > 0) & (targets - np.where(after > 0, ends[after - 1], 0) <= ends[after] - targets)
        cuts = np.unique(np.where(nearer_before, after, after + 1))
        cuts = cuts[(cuts > 0) & (cuts < len(batch_rows))]
        bounds = list(zip([0, *cuts.tolist()], [*cuts.tolist(), len(batch_rows)], strict=True))
        starts = np.concatenate([[0], ends])
        if all(starts[hi] - starts[lo] <= limit or hi - lo == 1 for lo, hi in bounds) or k >= len(batch_rows):
            break
        k += 1
    return _split_over(bounds, starts, limit)


def _split_over(bounds: list[tuple[int, int]], starts: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """`bounds` with every range over `limit` rows (of more than one batch) cut greedily."""
    out: list[tuple[int, int]] = []
    for lo, hi in bounds:
        first = lo
        for i in range(lo + 1, hi):
            if starts[i + 1] - starts[first] > limit:
                out.append((first, i))
                first = i
        out.append((first, hi))
    return out


_CC_INDEX, _PREFIX_LEN = "cc_index", "client_prefix_len"
_CHECKED = [(COLUMNS.index(name), name, COLUMN_DTYPES[name]) for name in (_CC_INDEX, _PREFIX_LEN)]


def _value_errors(batches: Sequence[ScannedBatch]) -> dict[int, str]:
    """{index: reason} of the batches whose values decode_group refuses: cc_index, client_prefix_len.

    Read from those two columns alone (the rows are decoded later, slice by slice), with the
    decoder's reasons; decode_all on each slice stays the authority (insert(): what it still
    refuses is dead-lettered there).
    """
    bad: dict[int, str] = {}
    for i, b in enumerate(batches):
        if not b.rows:
            continue
        top: dict[str, int] = {}
        for k, name, dtype in _CHECKED:
            if b.spans is None:
                values = b.columns[name] if b.columns is not None else None
            else:
                start, end = (int(x) for x in b.spans[k])
                fits = end - start == b.rows * dtype.itemsize
                values = np.frombuffer(b.data, dtype=dtype, count=b.rows, offset=start) if fits else None
            if values is None or not len(values):
                break  # the decoder reports it
            top[name] = int(values.max())
        else:
            names = len(b.header.cc_names)
            if top[_CC_INDEX] >= names:
                bad[i] = f"cc_index {top[_CC_INDEX]} outside cc_names ({names} names)"
            elif top[_PREFIX_LEN] > MAX_PREFIX_LEN:
                bad[i] = f"client_prefix_len {top[_PREFIX_LEN]} > {MAX_PREFIX_LEN}"
    return bad


def _take_rows(columns: Prepared, offsets: np.ndarray, batches: list[int]) -> tuple[Prepared, int]:
    """The rows of some batches (indexes into the batches whose rows `columns` holds, in order)."""
    rows = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in batches])
    out: Prepared = {
        name: StrColumn(col.codes[rows], col.values) if isinstance(col, StrColumn) else col[rows]
        for name, col in columns.items()
    }
    return out, int(rows.shape[0])
