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
from typing import Any

import numpy as np

from controller.ingest.audit_rows import AuditRows
from controller.ingest.columns import TCPINFO_TYPES, Prepared, prepare, to_insert_columns
from controller.ingest.flush import FlushResult, Incoming, PreparedFlush
from controller.ingest.ledger import Identity, Ledger
from controller.ingest.metrics import IngestMetrics
from controller.ingest.sequence import Fill, Gap, Key, SeenBatch, SequenceTracker, find_fills
from controller.ingest.settings import IngestSettings
from controller.ingest.shards import row_shards, take_rows
from controller.ingest.slices import slice_bounds, take_batches, value_errors
from controller.store import Store, StoreContentError
from controller.store.columns import BlockColumns
from schemas.tcpinfo_decode import BatchDecodeError, ScannedBatch, decode_all, scan_batch

log = logging.getLogger("dyncc.ingest")

TABLE = "tcpinfo"
#: rows of one insert at most (whole batches; a larger batch goes alone): the `--slice-rows` default
SLICE_ROWS: int = IngestSettings.defaults()["slice_rows"]
#: rows of one Native block of a streamed insert at most (whole batches): the `--block-rows` default
BLOCK_ROWS: int = IngestSettings.defaults()["block_rows"]


def _fill_identity(f: Fill) -> Identity:
    return (f.gap.host, f.gap.run_id, f.sequence)


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
        self.ledger = Ledger(store, native)
        self.audit = AuditRows(store, native)
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
            self.audit.dead_letters([(item, reason)])
        except StoreContentError as exc:  # not even its raw bytes are accepted: keep where and why
            bare = Incoming(b"", item.topic, item.partition, item.offset)
            self.audit.dead_letters([(bare, f"{reason}; raw bytes not stored: {exc}")])
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
        presence = self.ledger.presence([b.identity for _, b in fresh])
        sharded = len(self.store.shard_stores()) > 1
        # one server: a batch in the ledger is skipped; a cluster: an empty one is, a batch with
        # rows is decoded and only its rows missing from their shards are sent (insert())
        todo = [(item, b) for item, b in fresh if b.identity not in presence or (sharded and b.rows)]
        result.duplicates += len(unique) - len(todo)
        nonempty = [(item, b) for item, b in todo if b.rows]
        empty = [b for _, b in todo if not b.rows]
        bad = value_errors([b for _, b in nonempty])
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
        baseline = self.ledger.last_sequences(unknown) if unknown else {}
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
        gaps = self.ledger.recorded_gaps(keys)
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
            self.audit.dead_letters(result.dead_letters)
        if result.gaps:
            self.audit.gaps(result.gaps)
        if prep.empty:
            self.ledger.insert_empty(prep.empty)
        for lo, hi in slice_bounds([b.rows for _, b in prep.loaded], self.slice_rows):
            self._insert_slice(prep, prep.loaded[lo:hi])
        if prep.fills:  # after the rows: a fill says the batch is in the ledger
            self.audit.fills(prep.fills)
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
        if bad:  # values value_errors lets through: the decoder is the authority (left out of the blocks)
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
        if bad:  # values value_errors lets through: the decoder is the authority
            self._refuse(prep, [(*part[i], part[i][1].rows, reason) for i, reason in sorted(bad.items())])
            part = [x for i, x in enumerate(part) if i not in bad]
        if not part:
            return
        columns, rows = prepare(group)
        del group
        batch_rows = [b.rows for _, b in part]
        if prep.presence:  # a cluster: only the rows missing from their shards
            columns, batch_rows = self.ledger.unloaded(columns, part, batch_rows, prep.presence)
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
        presence = self.ledger.presence([b.identity for _, b in loaded])
        columns, batch_rows = self.ledger.unloaded(columns, loaded, batch_rows, presence)
        offsets = np.concatenate([[0], np.cumsum(batch_rows)]).astype(np.int64)
        todo = [i for i, n in enumerate(batch_rows) if n]
        refused: dict[int, str] = {}

        def land(idx: list[int], tried: bool, reason: str) -> None:
            if not tried:
                try:
                    self._insert_rows(*take_batches(columns, offsets, idx))
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
        self.audit.dead_letters(dead)
        result.dead_letters += dead
        if gaps:
            self.audit.gaps(gaps)
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
