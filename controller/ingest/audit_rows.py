"""The loader's audit rows: dead letters (ingest_dead_letter), sequence gaps
(ingest_sequence_gaps) and their fills (ingest_gap_fills), as the writer (controller/ingest/
writer.py) records them; and the small insert every loader table of a few rows goes through
(`insert_small`: a Native block on a server, the store's plain insert with native=False).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from controller.ingest.sequence import Fill, Gap

if TYPE_CHECKING:
    from controller.store import Store


class Message(Protocol):
    """What a dead letter keeps of a message: where it came from and its bytes."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def value(self) -> bytes: ...


def now_s() -> int:
    return int(time.time())


def insert_small(store: Store, native: bool, table: str, columns: dict[str, np.ndarray]) -> None:
    """A few rows of the loader's own tables: the Native insert (no pandas on a server's
    connection: docs/performance.md), or with native=False the store's plain insert."""
    if native:
        store.bulk_insert(table, columns, len(next(iter(columns.values()))))
    else:
        store.insert_columns(table, columns)


class AuditRows:
    def __init__(self, store: Store, native: bool) -> None:
        self.store = store
        self.native = native

    def dead_letters(self, dead: Sequence[tuple[Message, str]]) -> None:
        """ingest_dead_letter rows: each message's position and bytes, with why it was refused."""
        n = len(dead)
        insert_small(
            self.store,
            self.native,
            "ingest_dead_letter",
            {
                "time": np.full(n, now_s(), dtype=np.uint32),
                "topic": np.array([i.topic for i, _ in dead], dtype=object),
                "partition": np.array([i.partition for i, _ in dead], dtype=np.int32),
                "offset": np.array([i.offset for i, _ in dead], dtype=np.int64),
                "error": np.array([r for _, r in dead], dtype=object),
                "raw": np.array([i.value for i, _ in dead] + [b""], dtype=object)[:n],
            },
        )

    def gaps(self, gaps: Sequence[Gap]) -> None:
        """ingest_sequence_gaps rows: the sequences a host's run skipped."""
        n = len(gaps)
        insert_small(
            self.store,
            self.native,
            "ingest_sequence_gaps",
            {
                "detected_at": np.full(n, now_s(), dtype=np.uint32),
                "time": np.array([g.time for g in gaps], dtype=np.uint32),
                "pop": np.array([g.pop for g in gaps], dtype=object),
                "host": np.array([g.host for g in gaps], dtype=object),
                "run_id": np.array([g.run_id for g in gaps], dtype=np.uint64),
                "from_sequence": np.array([g.from_sequence for g in gaps], dtype=np.uint64),
                "to_sequence": np.array([g.to_sequence for g in gaps], dtype=np.uint64),
                "missing": np.array([g.missing for g in gaps], dtype=np.uint64),
            },
        )

    def fills(self, fills: Sequence[Fill]) -> None:
        """ingest_gap_fills rows: the batches that arrived late inside a recorded gap."""
        n = len(fills)
        insert_small(
            self.store,
            self.native,
            "ingest_gap_fills",
            {
                "filled_at": np.full(n, now_s(), dtype=np.uint32),
                "time": np.array([f.gap.time for f in fills], dtype=np.uint32),
                "pop": np.array([f.gap.pop for f in fills], dtype=object),
                "host": np.array([f.gap.host for f in fills], dtype=object),
                "run_id": np.array([f.gap.run_id for f in fills], dtype=np.uint64),
                "from_sequence": np.array([f.gap.from_sequence for f in fills], dtype=np.uint64),
                "sequence": np.array([f.sequence for f in fills], dtype=np.uint64),
            },
        )
