"""BatchWriter on every back end (ClickHouse 18.16, chDB and the 2 x 2 cluster): rows once, values
equal, dead letters, gaps.  On the cluster a batch's rows span shards and every shard keeps the
ledger of its own rows, so the ledger checks read shard by shard (Store.shard_stores)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from controller.ingest.columns import format_prefix
from controller.ingest.writer import BatchWriter, Incoming
from controller.store import ClusterStore, Store
from schemas.tcpinfo_decode import decode_batch
from schemas.tcpinfo_encode import BatchHeader
from tests.support.cluster_util import sync_replicas
from tests.support.ingest_synth import synth_columns, synth_messages
from tests.support.tcpinfo_batches import encode_batches


def _msgs(rows: int, seed: int = 5, **kw: object) -> list[bytes]:
    return [m for _, m in synth_messages(rows, rows_per_poll=500, seed=seed, max_bytes=40_000, **kw)]  # type: ignore[arg-type]


def _count(store: Store, table: str = "tcpinfo") -> int:
    _synced(store)
    return int(store.query_rows(f"SELECT count() FROM {table}")[0][0])


def _synced(store: Store) -> None:
    """On the cluster: every replica caught up (a Distributed read may go to either replica of a shard)."""
    if isinstance(store, ClusterStore):
        sync_replicas(store.url.redacted())


@pytest.fixture(params=["clickhouse", "chdb", "cluster"])
def store_url(request: pytest.FixtureRequest) -> str:
    """This module runs on the cluster too (tests/conftest.py's store_url has the other two)."""
    fixture = {"clickhouse": "clickhouse_db_url", "chdb": "chdb_url", "cluster": "cluster_db_url"}[request.param]
    return str(request.getfixturevalue(fixture))


def _assert_ledger(store: Store, batches: int, rows: int) -> None:
    """`batches` batches of `rows` rows in all in the ledger, one entry per batch on each shard."""
    _synced(store)
    for shard in store.shard_stores():
        entries, distinct = shard.query_rows("SELECT count(), uniqExact(host, run_id, sequence) FROM ingest_batches")[0]
        assert int(entries) == int(distinct)
    found = store.query_rows("SELECT uniqExact(host, run_id, sequence), sum(rows) FROM ingest_batches")[0]
    assert (int(found[0]), int(found[1])) == (batches, rows)


def _verify(store: Store, span: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """ingest_verify.sql on every shard (one server: the store itself)."""
    from controller.store.sql import query

    return [row for shard in store.shard_stores() for row in shard.query_rows(query("ingest_verify"), span)]


def test_rows_land_once_with_equal_values(store: Store) -> None:
    msgs = _msgs(4000)
    writer = BatchWriter(store)
    res = writer.write(msgs)
    ref = [decode_batch(m) for m in msgs]
    total = sum(r.row_count for r in ref)
    assert res.rows == total and res.batches == len(msgs)
    assert _count(store) == total
    df = store.query_df(
        "SELECT host, sequence, cookie, rtt, bytes_acked, max_pacing_rate, cc, prefix, toUInt32(time) AS t, "
        "hex(dst_addr) AS dst, tcp_info_len FROM tcpinfo ORDER BY host, sequence, cookie"
    )
    exp = pd.DataFrame(
        {
            "host": np.concatenate([[r.host] * r.row_count for r in ref]),
            "sequence": np.concatenate([[r.sequence] * r.row_count for r in ref]).astype(np.uint64),
            "cookie": np.concatenate([r.columns["cookie"] for r in ref]),
            "rtt": np.concatenate([r.columns["rtt"] for r in ref]),
            "bytes_acked": np.concatenate([r.columns["bytes_acked"] for r in ref]),
            "max_pacing_rate": np.concatenate([r.columns["max_pacing_rate"] for r in ref]),
            "cc": np.concatenate([r.cc() for r in ref]),
            "prefix": [
                format_prefix(p.tobytes(), int(n))
                for r in ref
                for p, n in zip(r.columns["client_prefix"], r.columns["client_prefix_len"], strict=True)
            ],
            "t": np.concatenate([[r.poll_start_ns // 10**9] * r.row_count for r in ref]),
            "dst": [bytes(a).hex().upper() for r in ref for a in r.columns["dst_addr"]],
            "tcp_info_len": np.concatenate([r.columns["tcp_info_len"] for r in ref]),
        }
    ).sort_values(["host", "sequence", "cookie"], ignore_index=True)
    for col in exp.columns:
        assert [str(v) for v in df[col]] == [str(v) for v in exp[col]], col
    _assert_ledger(store, len(msgs), total)


def test_redelivered_batches_are_skipped(store: Store) -> None:
    msgs = _msgs(3000)
    half = len(msgs) // 2
    BatchWriter(store).write(msgs[:half])
    # a new writer (a restarted loader) gets an overlapping redelivery, some batches twice in one group
    res = BatchWriter(store).write(msgs[half - 3 :] + msgs[:2])
    assert res.duplicates == 5
    total = sum(decode_batch(m).row_count for m in msgs)
    assert _count(store) == total
    assert (
        int(
            store.query_rows(
                "SELECT count() FROM (SELECT host, sequence FROM tcpinfo GROUP BY host, sequence, "
                "cookie HAVING count() > 1)"
            )[0][0]
        )
        == 0
    )


def test_bad_messages_dead_lettered_and_the_rest_loaded(store: Store) -> None:
    msgs = _msgs(3000)
    garbage = b"\x08\x01 not a batch \xff\xff\xff\xff"
    truncated = msgs[3][: len(msgs[3]) // 3]
    items = [Incoming(m, "t", 0, i) for i, m in enumerate(msgs[:3])]
    items += [Incoming(garbage, "t", 0, 100), Incoming(truncated, "t", 1, 101)]
    items += [Incoming(m, "t", 0, 200 + i) for i, m in enumerate(msgs[3:])]
    res = BatchWriter(store).flush(items)
    assert len(res.dead_letters) == 2
    assert _count(store) == sum(decode_batch(m).row_count for m in msgs)
    rows = store.query_rows(
        "SELECT topic, partition, offset, length(raw), error FROM ingest_dead_letter ORDER BY offset"
    )
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("t", 0, 100, len(garbage)),
        ("t", 1, 101, len(truncated)),
    ]
    assert all(r[4] for r in rows)


def test_gaps_empty_batches_and_restart_baseline(store: Store) -> None:
    rng = np.random.default_rng(1)
    header = BatchHeader(
        host="edge9", pop="ams1", run_id=11, poll_start_ns=1_700_000_000 * 10**9, cc_names=["cubic", "bbr"]
    )

    def batch(seq: int, rows: int, run_id: int = 11) -> bytes:
        header.run_id = run_id
        return encode_batches(synth_columns(rows, rng), header, seq)[0]

    writer = BatchWriter(store)
    res = writer.write([batch(1, 10), batch(2, 0), batch(3, 5), batch(7, 4)])
    assert res.empty == 1 and [(g.from_sequence, g.to_sequence, g.missing) for g in res.gaps] == [(4, 6, 3)]
    # a restarted loader knows the last sequence from the ledger (empty batch 8 included)
    res2 = BatchWriter(store).write([batch(8, 0)])
    assert res2.gaps == [] and res2.empty == 1
    res3 = BatchWriter(store).write([batch(10, 3), batch(1, 2, run_id=12)])
    assert [(g.from_sequence, g.missing) for g in res3.gaps] == [(9, 1)]  # new run 12: no gap
    rows = store.query_rows(
        "SELECT host, run_id, from_sequence, to_sequence, missing FROM ingest_sequence_gaps ORDER BY from_sequence"
    )
    assert [tuple(r) for r in rows] == [("edge9", 11, 4, 6, 3), ("edge9", 11, 9, 9, 1)]
    assert _count(store) == 10 + 5 + 4 + 3 + 2


def test_verify_and_gap_queries(store: Store) -> None:
    import datetime as dt

    from controller.store.sql import query

    msgs = _msgs(1500, seed=9)
    BatchWriter(store).write(msgs)
    span = {"start": dt.datetime(2000, 1, 1), "end": dt.datetime(2100, 1, 1)}
    assert _verify(store, span) == []
    # a batch loaded twice behind the ledger's back (e.g. a server crash between the two parts) shows up
    first = decode_batch(msgs[0])
    store.execute(
        "INSERT INTO tcpinfo SELECT * FROM tcpinfo WHERE host = %(h)s AND sequence = %(s)s",
        {"h": first.host, "s": first.sequence},
    )
    bad = _verify(store, span)  # on the cluster: on every shard holding rows of the batch
    assert bad and {(r[0], int(r[2])) for r in bad} == {(first.host, first.sequence)}
    rng = np.random.default_rng(2)
    header = BatchHeader(
        host="edge7", pop="lhr1", run_id=3, poll_start_ns=1_700_000_000 * 10**9, cc_names=["cubic", "bbr"]
    )
    BatchWriter(store).write([encode_batches(synth_columns(2, rng), header, s)[0] for s in (1, 4, 9)])
    assert store.query_rows(query("ingest_gaps"), span) == [
        ("lhr1", "edge7", 2, 6, dt.datetime(2023, 11, 14, 22, 13, 20))
    ]


def test_cli_replays_a_collector_file_into_chdb(tmp_path: Path) -> None:
    msgs = _msgs(2000, seed=12)
    path = tmp_path / "batches.bin"
    with open(path, "wb") as fh:
        for m in msgs:
            fh.write(len(m).to_bytes(4, "big") + m)
        fh.write((999_999).to_bytes(4, "big") + b"cut off")  # damaged tail
    url = f"chdb://{tmp_path / 'db'}?database=replay&ttl=off"
    cmd = [
        sys.executable,
        "-m",
        "dyncc.cli",
        "ingest",
        "--from-file",
        str(path),
        "--clickhouse",
        url,
        "--metrics-port",
        "0",
    ]
    for _ in range(2):  # the second replay is deduplicated
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert "already loaded" in proc.stderr
    check = (
        f"from controller.store import open_store; s = open_store({url!r}); "
        "print(s.query_rows('SELECT count() FROM tcpinfo')[0][0], "
        "s.query_rows('SELECT count(), min(offset) FROM ingest_dead_letter FINAL')[0])"
    )
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60).stdout.split(
        None, 1
    )
    assert int(out[0]) == sum(decode_batch(m).row_count for m in msgs)
    assert out[1].strip() == f"(1, {sum(4 + len(m) for m in msgs)})"


@pytest.mark.parametrize(
    "extra, reason",
    [([], "either --kafka"), (["--kafka", "127.0.0.1:1", "--inserters", "0"], "bad --inserters 0: must be at least 1")],
)
def test_cli_rejects_bad_arguments(extra: list[str], reason: str) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dyncc.cli",
            "ingest",
            "--clickhouse",
            "chdb:///tmp/x",
            "--metrics-port",
            "0",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and reason in proc.stderr and proc.stderr.count("\n") == 1


def test_fallback_insert_paths_load_the_same_rows(store: Store) -> None:
    msgs = _msgs(1500, seed=21)
    total = sum(decode_batch(m).row_count for m in msgs)
    per_server_types = BatchWriter(store)
    store._block_ok = False  # type: ignore[attr-defined]  # ClickHouse: serialize per the server's sample block
    per_server_types.write(msgs[: len(msgs) // 2])
    driver = BatchWriter(store, native=False)  # clickhouse-driver's / chDB's own insert
    driver.write(msgs[len(msgs) // 2 :])
    assert _count(store) == total
    _assert_ledger(store, len(msgs), total)


def test_replay_in_many_groups_loads_every_row_once(store: Store, tmp_path: Path) -> None:
    """--from-file reads as it loads and prepares the next group while one is inserted: still exactly once."""
    from controller.ingest.files import iter_records, read_records, replay_file

    msgs = _msgs(6000, seed=21)
    records = [msgs[0], *msgs[:7], b"\x0a\xff not a batch", *msgs[7:]]  # a repeat and a dead letter
    data = b"".join(len(m).to_bytes(4, "big") + m for m in records) + (5).to_bytes(4, "big") + b"cut"
    path = tmp_path / "batches.bin"
    path.write_bytes(data)
    with path.open("rb") as fh:  # the streaming reader yields what the in-memory one does
        streamed = [(r.value, r.offset) for r in read_records(fh, "f")]
    assert streamed == [(r.value, r.offset) for r in iter_records(data, "f")]
    expected = sum(decode_batch(m).row_count for m in msgs)
    writer = BatchWriter(store)
    total = replay_file(writer, path, max_bytes=60_000)  # a group of about two messages
    assert total.messages == len(records) + 1 and total.rows == expected == _count(store)
    assert total.duplicates == 1 and len(total.dead_letters) == 2 and total.gaps == []
    again = replay_file(writer, path, max_bytes=200_000)
    assert again.rows == 0 and again.duplicates == len(msgs) + 1 and _count(store) == expected
    writer.close()
