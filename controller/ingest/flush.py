"""The records of one flush of the writer (controller/ingest/writer.py): `Incoming` (a message,
where it came from, its scan), `FlushResult` (what a flush loaded, skipped, dead-lettered and
found missing) and `PreparedFlush` (a flush whose look-ups and checks are done and whose writes
are not).  Data only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.ingest.ledger import Identity
from controller.ingest.sequence import Fill, Gap, Key
from schemas.tcpinfo_decode import ScannedBatch

__all__ = ["FlushResult", "Incoming", "PreparedFlush"]


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
