"""Ingest benchmark: Kafka -> `dyncc ingest` -> ClickHouse 18.16 vs clickhouse-client native insert.

    python bench/ingest.py [--rows 1000000] [--kafka 127.0.0.1:19092]
                           [--clickhouse clickhouse://default:@127.0.0.1:19000/default]

1. Makes ROWS rows of realistic columns (tests.support.ingest_synth, encoded by the
   collector's codec, one message per poll of 280 sockets as the collector's
   default caps split them (~120 KB each), 8 hosts; topics have 4 partitions),
   and produces them zstd-compressed at level 1 like the collector's Kafka sink
   (--compression none|lz4|zstd to compare).
2. Reference: the same rows as a Native file, inserted by
   `clickhouse-client --port P` into a fresh database with the full schema
   (same materialized views the loader feeds).  The file holds the rows in the
   order they were produced (a scratch load into a Log table, which keeps
   insertion order), as a stream of edge polls arrives.  A second file holds
   them pre-sorted by the table's ORDER BY key, as a SELECT from the MergeTree
   table returns them: the server's insert sort is much cheaper on it (~25% less
   server CPU here), so it is printed for comparison, not used for the bar.
3. `dyncc ingest` with one loader, then two loaders (fresh topic, group and
   database each time).  One loader: the messages are in Kafka first and the
   loader runs with --drain.  Two loaders: they start first and the messages
   are produced once both hold partitions (so the rebalance of the second
   joining is not timed); when the table has every row they get SIGTERM.  A loader's rate is rows / (first
   message consumed -> last flush committed), from its closing log line; two
   loaders: total rows over the union of their windows.
4. Prints rows/s and ratios; the bar is one loader >= 0.8 x clickhouse-client.
   The reference runs before and after the loaders; the better one is used.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from controller.ingest.writer import BatchWriter
from controller.store import open_store, parse_store_url
from controller.store.migrate import apply_migrations
from schemas.tcpinfo_columns import DEFAULT_MAX_BYTES
from schemas.tcpinfo_decode import decode_batch
from tests.support.ingest_synth import synth_messages

_RATE = re.compile(r"loaded (\d+) rows in [\d.]+ s \(first message ([\d.]+) -> last flush ([\d.]+)\)")


def _db_url(base: str, db: str) -> str:
    return f"{base.rsplit('/', 1)[0]}/{db}"


def _fresh_db(base: str, tag: str) -> str:
    url = _db_url(base, f"bench_ingest_{tag}_{uuid.uuid4().hex[:8]}")
    store = open_store(url)
    apply_migrations(store)
    store.close()
    return url


def _drop(url: str) -> None:
    store = open_store(url)
    try:
        store._admin.execute(f"DROP DATABASE IF EXISTS {store.database}")  # type: ignore[attr-defined]
    finally:
        store.close()


def _count(url: str) -> int:
    store = open_store(url)
    try:
        return int(store.query_rows("SELECT count() FROM tcpinfo")[0][0])
    finally:
        store.close()


def _client(url: str, query: str, stdin: Path | None = None, stdout: Path | None = None) -> float:
    u = parse_store_url(url)
    cmd = [
        "clickhouse-client",
        "--host",
        u.host,
        "--port",
        str(u.port),
        "--database",
        u.database,
        "--query",
        query,
    ]
    fin = open(stdin, "rb") if stdin else None  # noqa: SIM115
    fout = open(stdout, "wb") if stdout else None  # noqa: SIM115
    try:
        t0 = time.perf_counter()
        subprocess.run(cmd, stdin=fin, stdout=fout, check=True)
        return time.perf_counter() - t0
    finally:
        for f in (fin, fout):
            if f:
                f.close()


def produce(kafka: str, topic: str, msgs: list[tuple[str, bytes]], **extra: object) -> None:
    producer = Producer(
        {
            "bootstrap.servers": kafka,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 1 << 20,
            **extra,
        }
    )
    for host, value in msgs:
        while True:
            try:
                producer.produce(topic, key=host.encode(), value=value)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(120) == 0


def new_topic(admin: AdminClient) -> str:
    topic = f"bench_ingest_{uuid.uuid4().hex[:8]}"
    for f in admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)]).values():
        f.result(timeout=30)
    return topic


def _loaders(
    n: int,
    kafka: str,
    admin: AdminClient,
    url: str,
    msgs: list[tuple[str, bytes]],
    rows: int,
    produce_cfg: dict[str, object],
) -> float:
    """n loaders on a fresh topic; returns rows/s over the loaders' combined window.

    One loader: the messages are produced first and the loader runs with --drain.
    Several: they start first and the messages are produced once every loader
    holds partitions (no rebalance inside the timed window); then SIGTERM.
    """
    topic = new_topic(admin)
    group = f"bench-{uuid.uuid4().hex[:8]}"
    if n == 1:
        produce(kafka, topic, msgs, **produce_cfg)
    procs = []
    for i in range(n):
        log = open(Path(tempfile.gettempdir()) / f"bench_ingest_{group}_{i}.log", "w+")  # noqa: SIM115
        cmd = [
            sys.executable,
            "-m",
            "controller.cli",
            "ingest",
            "--kafka",
            kafka,
            "--topic",
            topic,
            "--group",
            group,
            "--clickhouse",
            url,
            "--metrics-port",
            "0",
            "--no-migrate",
        ]
        procs.append((subprocess.Popen([*cmd, "--drain"] if n == 1 else cmd, stderr=log, text=True), log))
    try:
        if n > 1:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                texts = [Path(log.name).read_text() for _, log in procs]
                if all(f"assigned {topic}[" in t for t in texts) and not any(
                    t.rfind("revoked") > t.rfind("assigned") for t in texts
                ):
                    break
                time.sleep(0.2)
            else:
                raise SystemExit("loaders did not get partitions within 60 s")
            produce(kafka, topic, msgs, **produce_cfg)
        deadline = time.monotonic() + 600
        while _count(url) < rows and procs[0][0].poll() is None:
            if time.monotonic() > deadline:
                raise SystemExit("loaders did not load every row within 600 s")
            time.sleep(0.2)
    finally:
        for p, _ in procs:
            if p.poll() is None:
                p.terminate()
        for p, _ in procs:
            p.wait(60)
        for f in admin.delete_topics([topic]).values():
            f.result(timeout=30)
    windows, loaded = [], 0
    for p, log in procs:
        err = Path(log.name).read_text()
        log.close()
        os.unlink(log.name)
        m = _RATE.search(err)
        if p.returncode != 0 or not m:
            raise SystemExit(f"loader failed ({p.returncode}):\n{err[-3000:]}")
        loaded += int(m.group(1))
        windows.append((float(m.group(2)), float(m.group(3))))
        print(
            f"    loader pid {p.pid}: {m.group(1)} rows, {err.count(' flush ')} flushes, "
            f"{float(m.group(3)) - float(m.group(2)):.2f} s"
        )
    got = _count(url)
    if got != rows or loaded != rows:
        raise SystemExit(f"expected {rows} rows, table has {got}, loaders reported {loaded}")
    span = max(w[1] for w in windows) - min(w[0] for w in windows)
    return rows / span


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--kafka", default=os.environ.get("DYNCC_TEST_KAFKA", "127.0.0.1:19092"))
    ap.add_argument(
        "--clickhouse",
        default=os.environ.get("DYNCC_TEST_CLICKHOUSE", "clickhouse://default:@127.0.0.1:19000/default"),
    )
    ap.add_argument("--keep", action="store_true", help="keep the benchmark databases and topic")
    ap.add_argument("--compression", default="zstd", choices=("none", "lz4", "zstd"), help="producer codec")
    args = ap.parse_args()

    t0 = time.perf_counter()
    msgs = list(synth_messages(args.rows, hosts=8, rows_per_poll=280, seed=42, max_bytes=DEFAULT_MAX_BYTES))
    produce_cfg: dict[str, object] = {"compression.type": args.compression}
    if args.compression == "zstd":
        produce_cfg["compression.level"] = 1
    total_bytes = sum(len(m) for _, m in msgs)
    assert sum(decode_batch(m).row_count for _, m in msgs[:3]) > 0
    print(
        f"made {args.rows} rows in {len(msgs)} messages ({total_bytes / len(msgs) / 1024:.1f} KiB each, "
        f"{total_bytes / 1e6:.0f} MB) in {time.perf_counter() - t0:.1f} s"
    )

    admin = AdminClient({"bootstrap.servers": args.kafka})

    dbs: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        native = Path(tmp) / "rows.native"
        presorted = Path(tmp) / "rows-sorted.native"
        scratch = _fresh_db(args.clickhouse, "scratch")
        dbs.append(scratch)
        store = open_store(scratch)
        # a Log table keeps the rows in the order they are inserted: the file is the stream as it arrived
        store.execute("DROP TABLE tcpinfo_5m_mv")
        store.execute("RENAME TABLE tcpinfo TO tcpinfo_mergetree")
        store.execute("CREATE TABLE tcpinfo AS tcpinfo_mergetree ENGINE = Log")
        writer = BatchWriter(store)
        for i in range(0, len(msgs), 500):
            writer.write([m for _, m in msgs[i : i + 500]])
        writer.close()
        store.close()
        _client(scratch, "SELECT * FROM tcpinfo FORMAT Native", stdout=native)
        _client(scratch, "SELECT * FROM tcpinfo ORDER BY pop, prefix, time FORMAT Native", stdout=presorted)
        print(f"native files: {native.stat().st_size / 1e6:.0f} MB (arrival order, and pre-sorted by the key)")

        def reference(path: Path) -> float:
            url = _fresh_db(args.clickhouse, "ref")
            dbs.append(url)
            secs = _client(url, "INSERT INTO tcpinfo FORMAT Native", stdin=path)
            assert _count(url) == args.rows
            if not args.keep:
                _drop(url)
            return args.rows / secs

        ref1 = reference(native)
        print(f"clickhouse-client native insert: {ref1:,.0f} rows/s")
        url1 = _fresh_db(args.clickhouse, "one")
        dbs.append(url1)
        one = _loaders(1, args.kafka, admin, url1, msgs, args.rows, produce_cfg)
        print(f"one loader:  {one:,.0f} rows/s")
        ref2 = reference(native)
        print(f"clickhouse-client native insert: {ref2:,.0f} rows/s")
        sorted_runs = [reference(presorted) for _ in range(2)]
        print(f"clickhouse-client native insert, pre-sorted rows: {max(sorted_runs):,.0f} rows/s")
        url2 = _fresh_db(args.clickhouse, "two")
        dbs.append(url2)
        two = _loaders(2, args.kafka, admin, url2, msgs, args.rows, produce_cfg)
        print(f"two loaders: {two:,.0f} rows/s")

    ref = max(ref1, ref2)
    ref_sorted = max(sorted_runs)
    print()
    print(f"rows {args.rows:,}  clickhouse-client native {ref:,.0f} rows/s (runs: {ref1:,.0f}, {ref2:,.0f})")
    print(
        f"                 pre-sorted by the key {ref_sorted:,.0f} rows/s "
        f"(runs: {', '.join(f'{r:,.0f}' for r in sorted_runs)}; for comparison)"
    )
    print(f"one loader  {one:,.0f} rows/s = {one / ref:.2f} x native  (bar 0.80); {one / ref_sorted:.2f} x pre-sorted")
    print(f"two loaders {two:,.0f} rows/s = {two / ref:.2f} x native, {two / one:.2f} x one loader")
    if not args.keep:
        for url in dbs:
            _drop(url)
    return 0 if one >= 0.8 * ref else 1


if __name__ == "__main__":
    sys.exit(main())
