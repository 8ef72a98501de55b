"""On a ClickHouse server (18.16) BatchWriter sends each slice's INSERT as Native blocks of at most
`block_rows` rows, each decoded while the INSERT is open (BlockColumns, NativeStream): the loader
holds one block's columns per insert thread, not a slice's, and exactly-once is unchanged.

* Slices of several blocks land once: one INSERT per slice, every block whole batches of at most
  `block_rows` rows, a block's columns gone before the next one is decoded, and one part per
  INSERT (the server squashes its blocks).
* Both Native serializations stream (ahead of the server's answer, and per its sample block).
* The INSERT cut between two of its blocks (the connection dropped mid-INSERT): what the server
  kept of it is whole blocks with their ledger rows, written before the store returns (it waits
  for the INSERT to leave system.processes), and the retry at once (the same flush, or a
  redelivery to a new writer) loads every row once.
* `dyncc ingest --kafka` at the default flush settings, its scoring cache keeper included, never
  imports pandas or pyarrow and leaves clickhouse-driver's Date table unbuilt
  (docs/performance.md, "Loader memory").
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest

import controller.ingest.writer as writer_module
from controller.ingest.writer import BatchWriter, Incoming
from controller.store import Store, StoreUnavailable, open_store
from controller.store.columns import BlockColumns, Prepared, StrColumn
from controller.store.migrate import apply_migrations
from controller.store.sql import query
from schemas.tcpinfo_decode import scan_batch
from schemas.tcpinfo_encode import BatchHeader
from tests.support.ingest_kafka import count_rows, create_topic, produce
from tests.support.ingest_once import SPAN, assert_loaded_once
from tests.support.ingest_synth import synth_columns, synth_messages
from tests.support.tcpinfo_batches import encode_batches

BATCH_ROWS = 250


@pytest.fixture
def server(clickhouse_db_url: str) -> Iterator[Store]:
    """A ClickHouse 18.16 database with the schema (the back end that streams blocks)."""
    store = open_store(clickhouse_db_url)
    apply_migrations(store)
    yield store
    store.close()


class BlockRecorder:
    """The store, with the blocks of every streamed tcpinfo INSERT recorded as they are made.

    inserts: per INSERT, the rows of each of its blocks.  fail_after: raise StoreUnavailable in
    the middle of the next INSERT, after that many of its blocks were sent (the connection lost
    between two blocks).  Weak references to every block's arrays, to check they are gone.
    """

    def __init__(self, inner: Store, fail_after: int | None = None) -> None:
        self.inner = inner
        self.fail_after = fail_after
        self.inserts: list[list[int]] = []
        self.refs: list[weakref.ref[Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def bulk_insert(self, table: str, columns: Mapping[str, Any], rows: int, block: Any = None) -> None:
        if table != "tcpinfo" or not isinstance(columns, BlockColumns):
            self.inner.bulk_insert(table, columns, rows, block)
            return
        sizes: list[int] = []
        self.inserts.append(sizes)
        fail_after, self.fail_after = self.fail_after, None

        def make() -> Iterator[tuple[Prepared, int]]:
            for cols, n in columns.blocks():
                if fail_after is not None and len(sizes) == fail_after:
                    raise StoreUnavailable("injected: the connection went away between two blocks")
                sizes.append(n)
                self._watch(cols)
                yield cols, n
                del cols

        self.inner.bulk_insert(table, BlockColumns(columns.names, columns.rows, make, columns.types), rows)

    def _watch(self, cols: Prepared) -> None:
        for col in cols.values():
            arr = col.codes if isinstance(col, StrColumn) else col
            self.refs.append(weakref.ref(arr))
            if arr.base is not None:
                self.refs.append(weakref.ref(arr.base))


def _messages(rows: int, seed: int) -> list[bytes]:
    """Batches of 250 rows from 3 hosts."""
    return [m for _, m in synth_messages(rows, hosts=3, rows_per_poll=BATCH_ROWS, seed=seed, max_bytes=1 << 20)]


def _items(msgs: list[bytes]) -> list[Incoming]:
    return [Incoming(m, "t", 0, i) for i, m in enumerate(msgs)]


def _count(store: Store) -> int:
    return int(store.query_rows("SELECT count() FROM tcpinfo")[0][0])


@pytest.mark.parametrize("ahead", [True, False], ids=["serialized-ahead", "per-sample-block"])
def test_slices_stream_in_blocks_of_whole_batches_one_at_a_time(
    server: Store, monkeypatch: pytest.MonkeyPatch, ahead: bool
) -> None:
    msgs = _messages(12_000, seed=11)  # 48 batches of 250 rows
    recorder = BlockRecorder(server)
    if not ahead:
        server._block_ok = False  # type: ignore[attr-defined]  # serialize per the server's sample block
    decode_all = writer_module.decode_all
    alive_at_decode: list[int] = []

    def checked_decode_all(batches: Any) -> Any:
        alive_at_decode.append(sum(r() is not None for r in recorder.refs))
        return decode_all(batches)

    monkeypatch.setattr(writer_module, "decode_all", checked_decode_all)
    writer = BatchWriter(recorder, slice_rows=5_000, block_rows=1_100)  # type: ignore[arg-type]
    items = _items(msgs)
    result = writer.flush(items)
    assert (result.rows, result.batches, result.duplicates) == (12_000, 48, 0)
    # one INSERT per slice (at most 5,000 rows), each of several blocks of whole batches under 1,100 rows
    assert [sum(s) for s in recorder.inserts] == [4_000, 4_000, 4_000]
    assert all(len(s) == 4 for s in recorder.inserts)
    assert all(n <= 1_100 and n % BATCH_ROWS == 0 for s in recorder.inserts for n in s)
    assert len(alive_at_decode) == 12 and all(n == 0 for n in alive_at_decode), alive_at_decode
    assert all(r() is None for r in recorder.refs)
    assert all(i.landed and i.value == b"" for i in items)
    assert_loaded_once(server, msgs)
    # the server squashed each INSERT's blocks into one part (level 0: as inserted, merged or not)
    parts = "SELECT count() FROM system.parts WHERE database = currentDatabase() AND table = '{}' AND level = 0"
    assert int(server.query_rows(parts.format("tcpinfo"))[0][0]) == 3
    assert int(server.query_rows(parts.format("ingest_batches"))[0][0]) == 3
    again = BatchWriter(recorder, block_rows=1_100).flush(_items(msgs))  # type: ignore[arg-type]
    assert (again.rows, again.duplicates) == (0, 48)
    assert_loaded_once(server, msgs)


@pytest.mark.parametrize("retry", ["same-flush", "redelivered"])
def test_insert_cut_between_its_blocks_then_every_row_once(server: Store, retry: str) -> None:
    """18.16 keeps the blocks it received of an INSERT whose connection dropped (measured: both
    blocks sent before the cut land): whole blocks, i.e. whole batches, each with its ledger row,
    so the retry skips them through the ledger."""
    msgs = _messages(12_000, seed=12)
    recorder = BlockRecorder(server)
    writer = BatchWriter(recorder, slice_rows=4_000, block_rows=1_000)  # type: ignore[arg-type]
    items = _items(msgs)
    writer.flush(items[:16])  # the first slice lands: 16 batches
    assert _count(server) == 4_000
    recorder.fail_after = 2  # the next INSERT: two blocks sent, then the connection is gone
    with pytest.raises(StoreUnavailable, match="between two blocks"):
        writer.flush(items[16:])
    assert recorder.inserts[-1] == [1_000, 1_000]
    kept = _count(server)  # the store returned once the server was done with the cut INSERT
    assert kept in (4_000, 5_000, 6_000)  # whole blocks of the cut INSERT, if any
    assert int(server.query_rows("SELECT sum(rows) FROM ingest_batches")[0][0]) == kept
    assert server.query_rows(query("ingest_verify"), SPAN) == []
    assert not any(i.landed for i in items[16:])  # the writer did not see it land: the ledger knows
    if retry == "same-flush":
        result = writer.flush(items[16:])
    else:
        result = BatchWriter(recorder, slice_rows=4_000, block_rows=1_000).flush(_items(msgs))  # type: ignore[arg-type]
    assert result.rows == 12_000 - kept
    assert result.duplicates == (kept - (4_000 if retry == "same-flush" else 0)) // BATCH_ROWS
    assert_loaded_once(server, msgs)


def test_block_rows_must_be_positive(server: Store) -> None:
    with pytest.raises(ValueError, match="block_rows"):
        BatchWriter(server, block_rows=0)


_LOADER = """
import json, sys
from dyncc.cli import main
rc = main(sys.argv[1:])
import clickhouse_driver.columns.datecolumn as datecolumn
heavy = ("pandas", "pyarrow", "scipy", "matplotlib", "chdb")
print(json.dumps({"rc": rc, "heavy": [m for m in heavy if m in sys.modules], "dates": len(datecolumn._date_lut)}))
"""


def test_the_loader_never_imports_pandas(kafka_brokers: str, kafka_topic: str, clickhouse_db_url: str) -> None:
    """A running loader (default flush settings; its cache keeper every second) that writes its own
    tables (a dead letter, a sequence gap, an empty batch) and whose keeper computes and records
    the buckets of the last hour's batches; then SIGTERM."""
    create_topic(kafka_brokers, kafka_topic)
    ready = open_store(clickhouse_db_url)
    apply_migrations(ready)  # what the loader does at start; the test reads the tables from now on
    ready.close()
    now_s = int(time.time())
    start = (now_s - now_s % 300 - 2 * 300) * 10**9
    msgs = list(synth_messages(6_000, hosts=3, rows_per_poll=100, seed=13, max_bytes=40_000, start_ns=start))
    del msgs[7]  # a sequence gap
    rng = np.random.default_rng(1)
    empty = encode_batches(
        synth_columns(0, rng), BatchHeader(host="edge-empty", pop="fra1", run_id=1, poll_start_ns=start), 1
    )[0]
    produce(kafka_brokers, kafka_topic, [*msgs, ("edge-empty", empty), ("bad", b"\x0a\xff not a batch")])
    args = ["ingest", "--kafka", kafka_brokers, "--topic", kafka_topic, "--group", f"g-{kafka_topic}"]
    args += ["--clickhouse", clickhouse_db_url, "--metrics-port", "0", "--cache-every", "1s"]
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOADER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    rows = sum(scan_batch(m).rows for _, m in msgs)
    versions = "SELECT count() FROM scoring_versions WHERE samples > 0"
    try:
        deadline = time.monotonic() + 90
        while count_rows(clickhouse_db_url) < rows or count_rows(clickhouse_db_url, versions) < 2:
            assert time.monotonic() < deadline, "the loader did not load the rows and keep the cache within 90 s"
            assert proc.poll() is None
            time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1]) == {"rc": 0, "heavy": [], "dates": 1}, err[-3000:]
    assert count_rows(clickhouse_db_url) == rows
    for table in ("ingest_dead_letter", "ingest_sequence_gaps"):
        assert count_rows(clickhouse_db_url, f"SELECT count() FROM {table}") == 1, table
    assert count_rows(clickhouse_db_url, "SELECT count() FROM ingest_batches WHERE rows = 0") == 1
