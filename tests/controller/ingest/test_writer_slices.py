"""BatchWriter inserts a group in slices (`slice_rows`), on ClickHouse 18.16 and chDB.

* A group many slices large lands exactly once, each INSERT into tcpinfo at most
  `slice_rows` rows of whole batches (counted at the store: every tcpinfo insert
  goes through the wrapper below, which passes it on to the real server).
* The store failing after some slices landed (before a slice's INSERT, or after
  the server wrote it and the answer was lost), then a retry: every row once.
  The retry is the same flush again (the loader's retry: the writer knows which
  slices landed) or a fresh writer with the messages redelivered (a crash: the
  ledger knows).
* slice_bounds cuts whole batches, under the limit, in slices of about equal size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from controller.ingest.slices import slice_bounds
from controller.ingest.writer import BatchWriter, Incoming
from controller.store import Store, StoreUnavailable
from tests.support.ingest_once import assert_loaded_once
from tests.support.ingest_synth import synth_messages


class SliceCounter:
    """The store, with every tcpinfo insert counted (its rows) and, on request, failing.

    fail_at: the 0-based index of the tcpinfo insert that fails with StoreUnavailable;
    written: whether the server gets that insert first (the answer was lost) or not.
    """

    def __init__(self, inner: Store, fail_at: int | None = None, written: bool = False) -> None:
        self.inner = inner
        self.fail_at = fail_at
        self.written = written
        self.inserts: list[int] = []  # rows of each tcpinfo insert that reached the server

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _check(self, rows: int, send: Any) -> None:
        if self.fail_at is not None and len(self.inserts) == self.fail_at:
            self.fail_at = None
            if self.written:
                send()
                self.inserts.append(rows)
            raise StoreUnavailable("injected: the store went away")
        send()
        self.inserts.append(rows)

    def bulk_insert(self, table: str, columns: Mapping[str, Any], rows: int, block: Any = None) -> None:
        if table != "tcpinfo":
            self.inner.bulk_insert(table, columns, rows, block)
            return
        self._check(rows, lambda: self.inner.bulk_insert(table, columns, rows, block))

    def insert_columns(self, table: str, columns: Mapping[str, Any]) -> int:
        if table != "tcpinfo":
            return self.inner.insert_columns(table, columns)
        rows = len(next(iter(columns.values())))
        self._check(rows, lambda: self.inner.insert_columns(table, columns))
        return rows


def _messages(rows: int, seed: int = 3) -> list[bytes]:
    """Batches of 250 rows from 3 hosts (several batches per slice, a slice never a whole number of them)."""
    return [m for _, m in synth_messages(rows, hosts=3, rows_per_poll=250, seed=seed, max_bytes=1 << 20)]


def _items(msgs: list[bytes]) -> list[Incoming]:
    return [Incoming(m, "t", 0, i) for i, m in enumerate(msgs)]


def _assert_slices(inserts: list[int], limit: int, batch_rows: int) -> None:
    """Each insert at most `limit` rows, and whole batches (of `batch_rows` rows each)."""
    assert inserts, "no tcpinfo insert was counted"
    assert max(inserts) <= limit, inserts
    assert all(n % batch_rows == 0 for n in inserts), inserts


def test_a_group_of_many_slices_lands_once(store: Store) -> None:
    msgs = _messages(12_000)  # 48 batches of 250 rows
    counter = SliceCounter(store)
    writer = BatchWriter(counter, slice_rows=1_100)  # type: ignore[arg-type]
    items = _items(msgs)
    result = writer.flush(items)
    assert (result.rows, result.batches, result.duplicates) == (12_000, 48, 0)
    _assert_slices(counter.inserts, 1_100, 250)
    assert len(counter.inserts) >= 12_000 // 1_100 + 1 and sum(counter.inserts) == 12_000
    assert all(i.landed and i.value == b"" for i in items)  # their bytes let go once they landed
    assert_loaded_once(store, msgs)
    # the same group again (a redelivery): nothing more
    again = BatchWriter(SliceCounter(store), slice_rows=1_100).flush(_items(msgs))  # type: ignore[arg-type]
    assert (again.rows, again.duplicates) == (0, 48)
    assert_loaded_once(store, msgs)


@pytest.mark.parametrize("written", [False, True], ids=["before-the-insert", "answer-lost"])
@pytest.mark.parametrize("retry", ["same-flush", "redelivered"])
def test_store_fails_between_slices_then_every_row_once(store: Store, written: bool, retry: str) -> None:
    msgs = _messages(12_000, seed=4)
    counter = SliceCounter(store, fail_at=3, written=written)
    writer = BatchWriter(counter, slice_rows=2_000)  # type: ignore[arg-type]
    items = _items(msgs)
    with pytest.raises(StoreUnavailable):
        writer.flush(items)
    assert len(counter.inserts) == (4 if written else 3)  # some slices landed, the rest did not
    before = int(store.query_rows("SELECT count() FROM tcpinfo")[0][0])
    assert before == sum(counter.inserts) and 0 < before < 12_000
    if retry == "same-flush":  # the loader retries the group it holds
        counter = SliceCounter(store)
        writer.store = counter  # type: ignore[assignment]
        result = writer.flush(items)
        # the slices the writer saw land (3 x 2,000 rows: it knows them) and the one whose answer
        # was lost (the ledger has it) are already loaded: 8 batches of 250 rows each
        assert sum(i.landed for i in items) == (40 if written else 48)
        assert result.rows == sum(counter.inserts) == 12_000 - before
        assert result.duplicates == before // 250
    else:  # a crash: a new loader gets the messages again from Kafka; the ledger skips what landed
        counter = SliceCounter(store)
        result = BatchWriter(counter, slice_rows=2_000).flush(_items(msgs))  # type: ignore[arg-type]
        assert result.rows == sum(counter.inserts) == 12_000 - before
        assert result.duplicates == before // 250
    _assert_slices(counter.inserts, 2_000, 250)
    assert_loaded_once(store, msgs)


def test_a_failed_retry_after_slices_landed_still_loads_every_row_once(store: Store) -> None:
    """Two failures in a row at different slices, then a clean retry of the same items."""
    msgs = _messages(9_000, seed=5)
    items = _items(msgs)
    first = SliceCounter(store, fail_at=1)
    with pytest.raises(StoreUnavailable):
        BatchWriter(first, slice_rows=1_500).flush(items)  # type: ignore[arg-type]
    second = SliceCounter(store, fail_at=2, written=True)
    writer = BatchWriter(second, slice_rows=1_500)  # type: ignore[arg-type]
    with pytest.raises(StoreUnavailable):
        writer.flush(items)
    third = SliceCounter(store)
    writer.store = third  # type: ignore[assignment]
    writer.flush(items)
    for counter in (first, second, third):
        _assert_slices(counter.inserts, 1_500, 250)
    assert sum(first.inserts) + sum(second.inserts) + sum(third.inserts) == 9_000
    assert_loaded_once(store, msgs)


def test_a_batch_larger_than_a_slice_goes_alone(store: Store) -> None:
    msgs = _messages(3_000, seed=6)  # 12 batches of 250 rows
    counter = SliceCounter(store)
    BatchWriter(counter, slice_rows=100).flush(_items(msgs))  # type: ignore[arg-type]
    assert counter.inserts == [250] * 12
    assert_loaded_once(store, msgs)


def test_slice_rows_must_be_positive(store: Store) -> None:
    with pytest.raises(ValueError, match="slice_rows"):
        BatchWriter(store, slice_rows=0)


@pytest.mark.parametrize(
    ("rows", "limit", "want"),
    [
        ([], 10, []),
        ([3, 3, 3], 10, [(0, 3)]),
        ([280] * 536, 50_000, [(0, 134), (134, 268), (268, 402), (402, 536)]),  # 4 x 37,520 rows
        ([5, 100, 5], 10, [(0, 1), (1, 2), (2, 3)]),  # the big batch alone
        ([0, 6, 0, 6, 0], 6, [(0, 2), (2, 5)]),
    ],
)
def test_slice_bounds(rows: list[int], limit: int, want: list[tuple[int, int]]) -> None:
    assert slice_bounds(rows, limit) == want


def test_slice_bounds_cover_every_batch_once_under_the_limit() -> None:
    import random

    rng = random.Random(7)
    for _ in range(2_000):
        rows = [rng.choice([0, 1, 5, 280, rng.randint(0, 1_000)]) for _ in range(rng.randint(1, 60))]
        limit = rng.randint(1, 3_000)
        bounds = slice_bounds(rows, limit)
        assert [lo for lo, _ in bounds] == [0] + [hi for _, hi in bounds[:-1]]
        assert bounds[-1][1] == len(rows) and all(hi > lo for lo, hi in bounds)
        assert all(sum(rows[lo:hi]) <= limit or hi - lo == 1 for lo, hi in bounds), (rows, limit, bounds)
        if sum(rows) > limit:  # about equal: no more slices than needed plus one per big batch
            assert len(bounds) <= 2 * (-(-sum(rows) // limit)) + sum(1 for r in rows if r > limit)
