"""Ingest at fleet scale and against hostile input, on ClickHouse 18.16 and chDB (and the real Kafka).

* The ledger look-ups send the batch identities as data: 10,000 hosts in one
  flush group (and a 10,000-host fleet at the default settings) load once.
* Header strings over their limits (a 300 KiB host name) are dead-lettered
  with the reason; the good batches land (BatchWriter, --from-file, Kafka).
* A batch that arrives late closes its sequence gap, in-process and after a
  loader restart.
* Store errors are classified: data the server refuses dead-letters only the
  batch responsible; connection errors stay retryable.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from controller.ingest.sequence import Gap, SeenBatch, SequenceTracker, find_fills
from controller.ingest.writer import BatchWriter, Incoming
from controller.store import ClickHouseStore, Store, StoreContentError, StoreError, StoreUnavailable, open_store
from controller.store.errors import classify
from controller.store.sql import query
from schemas.tcpinfo_columns import DEFAULT_MAX_BYTES
from schemas.tcpinfo_decode import HEADER_LIMITS, BatchDecodeError, decode_batch, scan_batch
from schemas.tcpinfo_encode import BatchHeader, encode_header
from tests.support.ingest_synth import synth_columns
from tests.support.tcpinfo_batches import encode_batches, split_bodies

POLL_NS = 1_700_000_000 * 10**9
SPAN = {"start": dt.datetime(2000, 1, 1), "end": dt.datetime(2100, 1, 1)}
HUGE_HOST = "h" * (300 << 10)  # 300 KiB
FREE_PORT = 20150  # in this file's private port range; nothing listens there


@functools.cache
def _fleet(hosts: int, rows: int = 2, seed: int = 1, first_sequence: int = 1) -> tuple[bytes, ...]:
    """One small batch per host (distinct host names), `rows` rows each."""
    rng = np.random.default_rng(seed)
    bodies = [body for _, body in split_bodies(synth_columns(rows * 64, rng), rows, DEFAULT_MAX_BYTES)]
    out = []
    for h in range(hosts):
        header = BatchHeader(
            host=f"edge{h:05d}.pop{h % 50:02d}.example.net",
            pop=f"pop{h % 50:02d}",
            run_id=7,
            poll_start_ns=POLL_NS + h * 10**9,
            cc_names=["cubic", "bbr"],
        )
        head = encode_header(header, sequence=first_sequence, batch_index=0, batch_count=1, row_count=rows)
        out.append(head + bodies[h % len(bodies)])
    return tuple(out)


def _batch(host: str, seq: int, rows: int = 3, *, run_id: int = 5, pop: str = "ams1", rtt: int | None = None) -> bytes:
    rng = np.random.default_rng(seq)
    cols = synth_columns(rows, rng)
    if rtt is not None:
        cols["rtt"][:] = rtt
    header = BatchHeader(
        host=host, pop=pop, run_id=run_id, poll_start_ns=POLL_NS + seq * 10**10, cc_names=["cubic", "bbr"]
    )
    return encode_batches(cols, header, seq)[0]


def _rows(msgs: Sequence[bytes]) -> int:
    return sum(decode_batch(m).row_count for m in msgs)


def _one(store: Store, sql: str) -> int:
    return int(store.query_rows(sql)[0][0])


def _duplicates(store: Store) -> int:
    return _one(
        store,
        "SELECT count() FROM (SELECT host, sequence, cookie FROM tcpinfo GROUP BY host, run_id, sequence, cookie "
        "HAVING count() > 1)",
    )


def _write_file(path: Path, msgs: Sequence[bytes]) -> list[int]:
    """A collector --sink file; returns each record's byte offset."""
    offsets = []
    with open(path, "wb") as fh:
        for m in msgs:
            offsets.append(fh.tell())
            fh.write(len(m).to_bytes(4, "big") + m)
    return offsets


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dyncc.cli", *args], capture_output=True, text=True, timeout=timeout)


_PROBE = """
import json, sys
from controller.store import open_store
s = open_store(sys.argv[1])
print(json.dumps([[str(v) for v in s.query_rows(q)[0]] for q in sys.argv[2:]]))
"""


def _probe(url: str, *sql: str) -> list[list[str]]:
    """First row of each query, read in a separate process (chDB: one directory per process)."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, url, *sql], capture_output=True, text=True, timeout=120, check=True
    )
    return list(json.loads(out.stdout))


def _replay_url(store_url: str, tmp_path: Path) -> str:
    """The store URL for a `dyncc ingest` subprocess: the server database, or chDB in its own directory."""
    if store_url.startswith("chdb:"):
        return f"chdb://{tmp_path / 'replay'}?database=replay&ttl=off"
    return store_url


def _create_topic(brokers: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": brokers})
    for f in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        f.result(timeout=30)


def _produce(brokers: str, topic: str, msgs: Sequence[bytes], keyed: bool = False) -> None:
    """Messages keyed by host, as collectors send them (keyed=True), or all to partition 0."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": brokers, "linger.ms": 5, "message.max.bytes": 2 << 20})
    for m in msgs:
        key = scan_batch(m).header.host[:64].encode() if keyed else None
        producer.produce(topic, key=key, value=m, partition=-1 if keyed else 0)
        producer.poll(0)
    assert producer.flush(30) == 0


def _ingest_kafka(brokers: str, topic: str, store_url: str) -> subprocess.CompletedProcess[str]:
    """`dyncc ingest --kafka ... --drain` with the default flush settings; exits 0 once caught up."""
    return _cli(
        "ingest",
        "--kafka",
        brokers,
        "--topic",
        topic,
        "--group",
        f"g-{topic}",
        "--clickhouse",
        store_url,
        "--metrics-port",
        "0",
        "--drain",
        timeout=120,
    )


# ---------------------------------------------------------------- 10,000 hosts


def test_ten_thousand_hosts_in_one_flush_group(store: Store) -> None:
    """The old look-up inlined one OR term per host (~1 MB of SQL here) and the server refused it."""
    msgs = _fleet(10_000)
    total = _rows(msgs)
    writer = BatchWriter(store)
    res = writer.flush([Incoming(m, "t", 0, i) for i, m in enumerate(msgs)])  # one group
    assert (res.rows, res.batches, res.dead_letters, res.gaps) == (total, 10_000, [], [])
    assert _one(store, "SELECT count() FROM tcpinfo") == total
    assert _one(store, "SELECT uniqExact(host) FROM tcpinfo") == 10_000
    assert _duplicates(store) == 0
    # the same group again (a redelivery) and to a restarted loader: every batch found in the ledger
    again = BatchWriter(store).flush([Incoming(m, "t", 0, i) for i, m in enumerate(msgs)])
    assert (again.rows, again.duplicates) == (0, 10_000)
    # the next batch of every host, to a restarted loader: the last sequences come from the ledger
    nxt = BatchWriter(store).write(_fleet(10_000, first_sequence=2, seed=2))
    assert (nxt.batches, nxt.duplicates, nxt.gaps) == (10_000, 0, [])
    assert _one(store, "SELECT count() FROM tcpinfo") == 2 * total
    assert store.query_rows(query("ingest_verify"), SPAN) == []


def test_ten_thousand_host_fleet_from_file_at_default_settings(store_url: str, tmp_path: Path) -> None:
    """`dyncc ingest --from-file` with its defaults groups the whole fleet in one flush; every row once."""
    msgs = _fleet(10_000, seed=3)
    path = tmp_path / "fleet.bin"
    _write_file(path, msgs)
    url = _replay_url(store_url, tmp_path)
    proc = _cli("ingest", "--from-file", str(path), "--clickhouse", url, "--metrics-port", "0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    count, hosts, dups = _probe(
        url,
        "SELECT count() FROM tcpinfo",
        "SELECT uniqExact(host) FROM tcpinfo",
        "SELECT count() FROM (SELECT host FROM tcpinfo GROUP BY host, run_id, sequence, cookie HAVING count() > 1)",
    )
    assert (int(count[0]), int(hosts[0]), int(dups[0])) == (_rows(msgs), 10_000, 0)


@pytest.mark.kafka
def test_ten_thousand_host_fleet_via_kafka_at_default_settings(
    kafka_brokers: str, kafka_topic: str, clickhouse_db_url: str
) -> None:
    """`dyncc ingest --kafka --drain` with the default flush settings (groups of thousands of hosts)."""
    msgs = _fleet(10_000, seed=7)
    _create_topic(kafka_brokers, kafka_topic, partitions=2)
    _produce(kafka_brokers, kafka_topic, msgs, keyed=True)
    proc = _ingest_kafka(kafka_brokers, kafka_topic, clickhouse_db_url)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = open_store(clickhouse_db_url)
    try:
        assert _one(s, "SELECT count() FROM tcpinfo") == _rows(msgs)
        assert _one(s, "SELECT uniqExact(host) FROM tcpinfo") == 10_000
        assert _duplicates(s) == 0
    finally:
        s.close()


# ---------------------------------------------------------------- header limits


def test_header_limits_are_checked_at_scan() -> None:
    ok = _batch("a" * 255, 1)
    assert scan_batch(ok).header.host == "a" * 255
    cases = [
        (_batch("a" * 256, 1), "host is 256 bytes, over the 255-byte limit"),
        (_batch("é" * 128, 1), "host is 256 bytes, over the 255-byte limit"),  # bytes, not characters
        (_batch(HUGE_HOST, 1), f"host is {300 << 10} bytes, over the 255-byte limit"),
        (_batch("edge1", 1, pop="p" * 65), "pop is 65 bytes, over the 64-byte limit"),
    ]
    rng = np.random.default_rng(1)
    long_cc = BatchHeader(host="edge1", run_id=1, poll_start_ns=POLL_NS, cc_names=["x" * 17])
    cases.append((encode_batches(synth_columns(2, rng), long_cc, 1)[0], "cc_names entry is 17 bytes"))
    long_ns = BatchHeader(host="edge1", netns="n" * 256, run_id=1, poll_start_ns=POLL_NS, cc_names=["cubic"])
    cases.append((encode_batches(synth_columns(2, rng), long_ns, 1)[0], "netns is 256 bytes"))
    for data, reason in cases:
        with pytest.raises(BatchDecodeError, match=reason):
            scan_batch(data)
    assert scan_batch(_batch("edge1", 1, pop="p" * 64)).header.pop == "p" * 64


def test_collector_limits_equal_the_codec_limits() -> None:
    from collector.telemetry import settings as collect_config

    assert collect_config.HEADER_LIMITS == HEADER_LIMITS


def test_collector_refuses_an_over_long_host_name_at_start() -> None:
    proc = _cli("collect", "--once", "--sink", "stdout", "--host", "h" * 256, timeout=60)
    assert proc.returncode == 2 and "256 bytes, over the 255-byte limit" in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_oversized_host_dead_lettered_by_the_writer(store: Store) -> None:
    """The Kafka loader's writer: the 300 KiB host is dead-lettered with its reason, the rest lands."""
    good = _fleet(40, seed=4)
    huge = _batch(HUGE_HOST, 1)
    items = [Incoming(m, "tcpinfo", 2, 100 + i) for i, m in enumerate(good[:20])]
    items.append(Incoming(huge, "tcpinfo", 2, 120))
    items += [Incoming(m, "tcpinfo", 2, 121 + i) for i, m in enumerate(good[20:])]
    res = BatchWriter(store).flush(items)
    assert res.rows == _rows(good) and [(i.offset, r) for i, r in res.dead_letters] == [
        (120, "host is 307200 bytes, over the 255-byte limit")
    ]
    assert _one(store, "SELECT count() FROM tcpinfo") == _rows(good)
    assert store.query_rows("SELECT topic, partition, offset, length(raw), error FROM ingest_dead_letter") == [
        ("tcpinfo", 2, 120, len(huge), "host is 307200 bytes, over the 255-byte limit")
    ]


def test_oversized_host_from_file_is_dead_lettered_and_the_rest_lands(store_url: str, tmp_path: Path) -> None:
    """Old code: the look-up statement passed max_query_size, exit 2 and not one row loaded."""
    good = _fleet(30, seed=5)
    huge = _batch(HUGE_HOST, 1)
    path = tmp_path / "batches.bin"
    offsets = _write_file(path, [*good[:10], huge, *good[10:]])
    url = _replay_url(store_url, tmp_path)
    proc = _cli("ingest", "--from-file", str(path), "--clickhouse", url, "--metrics-port", "0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "1 dead letters" in proc.stderr
    count, dead = _probe(
        url,
        "SELECT count() FROM tcpinfo",
        "SELECT count(), any(topic), any(offset), any(length(raw)), any(error) FROM ingest_dead_letter",
    )
    assert int(count[0]) == _rows(good)
    assert dead == ["1", str(path), str(offsets[10]), str(len(huge)), "host is 307200 bytes, over the 255-byte limit"]


@pytest.mark.kafka
def test_oversized_host_via_kafka_is_dead_lettered_and_offsets_advance(
    kafka_brokers: str, kafka_topic: str, clickhouse_db_url: str
) -> None:
    """`dyncc ingest --kafka --drain` (old code: paused and retried the group forever, never drained)."""
    from confluent_kafka import Consumer, TopicPartition

    _create_topic(kafka_brokers, kafka_topic, partitions=1)
    good = _fleet(30, seed=6)
    huge = _batch(HUGE_HOST, 1)
    _produce(kafka_brokers, kafka_topic, [*good[:15], huge, *good[15:]])
    proc = _ingest_kafka(kafka_brokers, kafka_topic, clickhouse_db_url)
    assert proc.returncode == 0, proc.stderr[-3000:]
    group = f"g-{kafka_topic}"
    s = open_store(clickhouse_db_url)
    try:
        assert _one(s, "SELECT count() FROM tcpinfo") == _rows(good)
        assert s.query_rows("SELECT topic, offset, length(raw), error FROM ingest_dead_letter") == [
            (kafka_topic, 15, len(huge), "host is 307200 bytes, over the 255-byte limit")
        ]
    finally:
        s.close()
    consumer = Consumer({"bootstrap.servers": kafka_brokers, "group.id": group, "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition(kafka_topic, 0)], timeout=30)
    finally:
        consumer.close()
    assert committed[0].offset == len(good) + 1


# ---------------------------------------------------------------- late batches close their gap


def test_tracker_finds_late_batches_and_the_gaps_they_fill() -> None:
    t = SequenceTracker()
    gaps, upd, behind = t.plan_behind([SeenBatch("h", 1, s, "p", 0) for s in (1, 2, 6, 9)])
    assert [(g.from_sequence, g.to_sequence) for g in gaps] == [(3, 5), (7, 8)] and behind == []
    t.apply(upd)
    late = [SeenBatch("h", 1, s, "p", 0) for s in (4, 2, 8)] + [SeenBatch("h", 2, 1, "p", 0)]
    gaps, _, behind = t.plan_behind(late)
    assert gaps == [] and [b.sequence for b in behind] == [2, 4, 8]  # run 2 is new: not behind
    fills = find_fills(behind, [Gap("h", 1, "p", 3, 5, 0), Gap("h", 1, "p", 7, 8, 0), Gap("x", 1, "p", 1, 9, 0)])
    assert [(f.gap.from_sequence, f.sequence) for f in fills] == [(3, 4), (7, 8)]  # 2 was never missing


def _open_gaps(store: Store) -> list[tuple[int, int, int]]:
    rows = store.query_rows(query("ingest_open_gaps"), SPAN)
    return [(int(r[3]), int(r[4]), int(r[5])) for r in rows]


def test_late_batch_closes_its_gap_in_process_and_after_a_restart(store: Store) -> None:
    writer = BatchWriter(store)
    first = writer.write([_batch("edge1", s) for s in (1, 2, 6)])
    assert [(g.from_sequence, g.to_sequence) for g in first.gaps] == [(3, 5)]
    assert _open_gaps(store) == [(3, 5, 3)]
    late = writer.write([_batch("edge1", 4)])  # same loader: the gap is known
    assert _open_gaps(store) == [(3, 5, 2)]
    assert store.query_rows(query("ingest_gaps"), SPAN)[0][3] == 2  # missing_batches
    assert (late.rows, late.gaps, late.filled) == (3, [], 1)
    # a restarted loader (nothing in memory) gets the other two late batches, one twice
    restarted = BatchWriter(store)
    res = restarted.write([_batch("edge1", 3), _batch("edge1", 5), _batch("edge1", 5), _batch("edge1", 7)])
    assert _open_gaps(store) == []
    assert store.query_rows(query("ingest_gaps"), SPAN) == []
    assert (res.filled, res.duplicates, res.gaps) == (2, 1, [])
    assert restarted.metrics.filled._value.get() == 2
    assert writer.metrics.missing._value.get() == 3 and writer.metrics.filled._value.get() == 1
    # a redelivery of a late batch loads nothing and fills nothing twice
    again = BatchWriter(store).write([_batch("edge1", 4)])
    assert (again.duplicates, again.filled, again.rows) == (1, 0, 0)
    assert _one(store, "SELECT count() FROM tcpinfo") == 7 * 3
    assert _one(store, "SELECT count() FROM ingest_gap_fills FINAL") == 3


def test_late_batch_fills_a_gap_of_a_flush_still_in_flight(store: Store) -> None:
    """The pipelined path (Kafka loader): the gap is not in the store yet when the late batch is prepared."""
    writer = BatchWriter(store)
    writer.write([_batch("edge2", 1)])
    a = writer.prepare([Incoming(_batch("edge2", 5), "t", 0, 1)])
    b = writer.prepare([Incoming(_batch("edge2", 3), "t", 0, 2)], pending=[a])
    assert [(g.from_sequence, g.to_sequence) for g in a.result.gaps] == [(2, 4)] and b.result.gaps == []
    writer.insert(a)
    writer.insert(b)
    writer.settle(a)
    settled = writer.settle(b)
    assert _open_gaps(store) == [(2, 4, 2)]
    assert settled.filled == 1


def test_a_dead_lettered_late_batch_does_not_close_its_gap(store: Store) -> None:
    writer = BatchWriter(store)
    writer.write([_batch("edge3", 1), _batch("edge3", 4)])
    res = writer.write([_batch("edge3", 2)[:-7]])  # cut short: undecodable
    assert len(res.dead_letters) == 1 and res.filled == 0
    assert _open_gaps(store) == [(2, 3, 2)]


# ---------------------------------------------------------------- store errors are classified


def test_error_classification() -> None:
    assert classify(62, "Syntax error: Max query size exceeded") is StoreContentError
    assert classify(395, "Value passed to 'throwIf' function is non zero") is StoreContentError
    assert classify(252, "Too many partitions for single INSERT block (more than 100)") is StoreContentError
    assert classify(252, "Too many parts (300). Merges are processing significantly slower") is StoreUnavailable
    for code in (159, 202, 209, 210, 241):
        assert classify(code) is StoreUnavailable
    assert classify(60, "Table x doesn't exist") is StoreError  # not the data's fault, not transient
    assert classify(None) is StoreError


def test_both_back_ends_classify_the_same(store: Store) -> None:
    with pytest.raises(StoreContentError, match="62"):
        store.query_rows("SELECT length('" + "x" * (300 << 10) + "')")
    with pytest.raises(StoreContentError, match="395"):
        store.query_rows("SELECT throwIf(number = 2) FROM system.numbers LIMIT 5")
    with pytest.raises(StoreError) as info:
        store.query_rows("SELECT * FROM no_such_table_here")
    assert type(info.value) is StoreError


def test_refused_value_dead_letters_only_the_culprit(store: Store) -> None:
    """A value the server refuses (a throwIf check, what a CHECK constraint does on newer servers).

    Old code: the whole group failed as "store unavailable" and was retried forever.
    """
    store.execute("ALTER TABLE tcpinfo ADD COLUMN rtt_check UInt8 DEFAULT throwIf(rtt > 60000000)")
    good = [_batch(f"edge{h}", s) for h in range(6) for s in (1, 2, 3)]
    culprit = _batch("edge2", 4, rtt=4_000_000_000)  # 66 minutes
    after = _batch("edge2", 5)
    items = [Incoming(m, "t", 1, i) for i, m in enumerate([*good[:9], culprit, *good[9:], after])]
    writer = BatchWriter(store)
    res = writer.flush(items)
    assert [(i.offset, r.startswith("refused by the store: ")) for i, r in res.dead_letters] == [(9, True)]
    assert "395" in res.dead_letters[0][1] and "throwIf" in res.dead_letters[0][1]
    assert res.rows == _rows([*good, after]) == _one(store, "SELECT count() FROM tcpinfo")
    assert _duplicates(store) == 0
    assert store.query_rows("SELECT offset, length(raw) FROM ingest_dead_letter") == [(9, len(culprit))]
    assert _one(store, "SELECT count() FROM ingest_batches WHERE host = 'edge2' AND sequence = 4") == 0
    assert [(g.host, g.from_sequence, g.to_sequence) for g in res.gaps] == [("edge2", 4, 4)]
    assert _open_gaps(store) == [(4, 4, 1)]
    # the pipelined path (Kafka loader) isolates it inside insert(): nothing raises, nothing pauses
    prep = writer.prepare(
        [Incoming(_batch("edge4", 9, rtt=70_000_000), "t", 1, 50), Incoming(_batch("edge4", 10), "t", 1, 51)]
    )
    writer.insert(prep)
    piped = writer.settle(prep)
    assert [i.offset for i, _ in piped.dead_letters] == [50] and piped.rows == 3


def test_a_replay_spanning_more_days_than_one_insert_may_write_lands_whole(store: Store) -> None:
    """chDB refuses one INSERT block over 100 partitions (days of tcpinfo; 18.16 has no such limit).

    A content error of the group, not of one batch: loaded in halves, every batch lands.
    """
    day = 86_400 * 10**9
    rng = np.random.default_rng(3)
    msgs = []
    for s in range(1, 131):  # 130 days, one batch a day
        header = BatchHeader(host="edge9", pop="ams1", run_id=1, poll_start_ns=POLL_NS + s * day, cc_names=["cubic"])
        cols = synth_columns(2, rng)
        cols["cc_index"][:] = 0
        msgs.append(encode_batches(cols, header, s)[0])
    res = BatchWriter(store).write(msgs)
    assert (res.rows, res.dead_letters, res.gaps) == (260, [], [])
    assert _one(store, "SELECT count() FROM tcpinfo") == 260 and _duplicates(store) == 0
    assert _one(store, "SELECT uniqExact(toDate(time)) FROM tcpinfo") == 130


def test_connection_errors_stay_retryable() -> None:
    store = open_store(f"clickhouse://default:@127.0.0.1:{FREE_PORT}/default?connect_timeout=1")
    assert isinstance(store, ClickHouseStore)
    try:
        writer = BatchWriter(store)
        with pytest.raises(StoreUnavailable, match="unreachable"):
            writer.flush([Incoming(_batch("edge1", 1), "t", 0, 0)])
        with pytest.raises(StoreUnavailable):
            writer.flush([Incoming(_batch(HUGE_HOST, 1), "t", 0, 1), Incoming(_batch("edge1", 2), "t", 0, 2)])
    finally:
        store.close()
