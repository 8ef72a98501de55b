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
   Each loader's peak RSS is printed too: its VmHWM, read while it runs
   (PeakRss; wait4's ru_maxrss would count this benchmark's own RSS at the fork).

    python bench/ingest.py --chdb-file [--rows 3000000] [--runs 3]

The embedded path instead: ROWS rows (timestamps of the last days, so no TTL
drops them) written as a collector file (`collect --sink file`), replayed by
`dyncc ingest --from-file FILE --clickhouse chdb:///DIR` at default settings
(a fresh directory per run, under TMPDIR).  Reference, in the same round: one
chDB process inserting the same rows, already decoded into Native blocks of
the loader's group size, from a Native file into the same schema
(`INSERT INTO tcpinfo SELECT * FROM file(F, Native)`, the statement alone
timed).  Prints, per run, the replay's rows/s (from its closing log line: first
record read -> last group settled), the whole command's wall time and peak RSS,
and the reference's rows/s; then median [range] of each.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
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

DYNCC = str(Path(sys.executable).with_name("dyncc"))
NAME_PREFIX = "bench_ingest"  # of the databases (and, with '-', the topics) made; --name-prefix
_RATE = re.compile(r"loaded (\d+) rows in [\d.]+ s \(first message ([\d.]+) -> last flush ([\d.]+)\)")


def _db_url(base: str, db: str) -> str:
    return f"{base.rsplit('/', 1)[0]}/{db}"


def _fresh_db(base: str, tag: str) -> str:
    url = _db_url(base, f"{NAME_PREFIX}_{tag}_{uuid.uuid4().hex[:8]}")
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
    topic = f"{NAME_PREFIX.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
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
    extra: list[str] | None = None,
) -> float:
    """n loaders on a fresh topic; returns rows/s over the loaders' combined window.

    One loader: the messages are produced first and the loader runs with --drain.
    Several: they start first and the messages are produced once every loader
    holds partitions (no rebalance inside the timed window); then SIGTERM.
    """
    topic = new_topic(admin)
    group = f"bench-{uuid.uuid4().hex[:8]}"
    rss: list[float] = []
    peaks: list[PeakRss] = []
    if n == 1:
        produce(kafka, topic, msgs, **produce_cfg)
    procs = []
    for i in range(n):
        log = open(Path(tempfile.gettempdir()) / f"bench_ingest_{group}_{i}.log", "w+")  # noqa: SIM115
        cmd = [
            sys.executable,
            "-m",
            "dyncc.cli",
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
            *(extra or []),
        ]
        proc = subprocess.Popen([*cmd, "--drain"] if n == 1 else cmd, stderr=log, text=True)
        procs.append((proc, log))
        peaks.append(PeakRss(proc.pid))
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
        for (p, _), hwm in zip(procs, peaks, strict=True):
            rss.append(_wait_rss(p, hwm))
        for f in admin.delete_topics([topic]).values():
            f.result(timeout=30)
        for f in admin.delete_consumer_groups([group]).values():  # the loaders are gone: empty
            try:
                f.result(timeout=30)
            except Exception as exc:  # a group that committed nothing may not exist
                print(f"    consumer group {group} not deleted: {exc}")
    windows, loaded = [], 0
    for (p, log), peak in zip(procs, rss, strict=True):
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
            f"{float(m.group(3)) - float(m.group(2)):.2f} s, peak RSS {peak:.0f} MB"
        )
    got = _count(url)
    if got != rows or loaded != rows:
        raise SystemExit(f"expected {rows} rows, table has {got}, loaders reported {loaded}")
    span = max(w[1] for w in windows) - min(w[0] for w in windows)
    return rows / span


class PeakRss:
    """The peak RSS of a running child, from its /proc/PID/status VmHWM, read every 20 ms.

    Not wait4's ru_maxrss: a child's maxrss counts the RSS of the address space it had
    before exec, i.e. this benchmark's own (~0.9 GB holding the messages) at the fork.
    VmHWM is the high-water mark of the loader's own address space; the last reading is
    at most 20 ms before it exits.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.kib = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        path = f"/proc/{self.pid}/status"
        while True:
            try:
                text = Path(path).read_text()
            except OSError:
                return
            m = re.search(r"^VmHWM:\s+(\d+) kB", text, re.M)
            if not m:  # a zombie: its memory is gone
                return
            self.kib = max(self.kib, int(m.group(1)))
            time.sleep(0.02)

    def mb(self) -> float:
        self._thread.join(timeout=5)
        return self.kib / 1024


def _wait_rss(p: subprocess.Popen[str], peak: PeakRss, timeout: float = 60) -> float:
    """Wait for `p` (SIGKILL after timeout s); its peak RSS in MB (VmHWM, PeakRss)."""
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(60)
    return peak.mb()


_REPLAY = re.compile(r"replayed .*; ([\d.]+) s, (\d+) rows/s")


def _native_block(columns: dict[str, object], rows: int) -> list[bytes]:
    """One block of ClickHouse's Native format (what `FORMAT Native` reads) for the tcpinfo columns."""
    import io

    from clickhouse_driver.varint import write_varint
    from clickhouse_driver.writer import write_binary_str

    from controller.ingest.columns import TCPINFO_TYPES
    from controller.store.native import column_payload

    head = io.BytesIO()
    write_varint(len(columns), head)
    write_varint(rows, head)
    parts = [head.getvalue()]
    for name, col in columns.items():
        h = io.BytesIO()
        write_binary_str(name, h)
        write_binary_str(TCPINFO_TYPES[name], h)
        payload = column_payload(TCPINFO_TYPES[name], col)  # type: ignore[arg-type]
        assert payload is not None
        parts += [h.getvalue(), payload.tobytes()]
    return parts


def _chdb_reference(native: Path, db: Path, rows: int) -> float:
    """rows/s of chDB inserting the Native file into a fresh schema (a child process; the INSERT timed)."""
    code = (
        "import sys, time\n"
        "from controller.store import open_store\n"
        "from controller.store.migrate import apply_migrations\n"
        "s = open_store(sys.argv[1]); apply_migrations(s)\n"
        "t = time.perf_counter()\n"
        "s.execute(f\"INSERT INTO tcpinfo SELECT * FROM file('{sys.argv[2]}', Native)\")\n"
        "took = time.perf_counter() - t\n"
        "n = s.query_rows('SELECT count() FROM tcpinfo')[0][0]\n"
        "print(took, n)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, f"chdb://{db}", str(native)],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    took, n = float(out[-2]), int(out[-1])
    if n != rows:
        raise SystemExit(f"reference loaded {n} rows, expected {rows}")
    return rows / took


def chdb_file(rows: int, runs: int) -> int:
    """`dyncc ingest --from-file` into chDB against chDB's own Native insert of the same rows."""
    import dataclasses
    import shutil
    import statistics
    import struct

    from controller.ingest.columns import prepare
    from controller.ingest.settings import IngestSettings
    from schemas.tcpinfo_decode import decode_all, scan_batch

    group_bytes = next(f.default for f in dataclasses.fields(IngestSettings) if f.name == "max_bytes")
    assert isinstance(group_bytes, int)
    start_ns = (int(time.time()) - (rows // 280 + 1) * 10 - 3600) * 1_000_000_000
    tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-chdb-"))
    try:
        path, native = tmp / "batches.bin", tmp / "rows.native"
        t0 = time.perf_counter()
        with path.open("wb") as f, native.open("wb") as nf:
            group: list[bytes] = []
            size = 0

            def block() -> None:
                cols, n = prepare(decode_all([scan_batch(m) for m in group])[0])
                for part in _native_block(cols, n):  # type: ignore[arg-type]
                    nf.write(part)

            for _, m in synth_messages(
                rows, hosts=8, rows_per_poll=280, seed=42, max_bytes=DEFAULT_MAX_BYTES, start_ns=start_ns
            ):
                f.write(struct.pack(">I", len(m)))
                f.write(m)
                group.append(m)
                size += len(m)
                if size >= group_bytes:
                    block()
                    group, size = [], 0
            if group:
                block()
        print(
            f"made {rows} rows: {path.stat().st_size / 1e6:.0f} MB collector file, "
            f"{native.stat().st_size / 1e6:.0f} MB Native file, in {time.perf_counter() - t0:.1f} s"
        )
        loader, wall, peak, ref = [], [], [], []
        for r in range(runs):
            db = tmp / f"ref-{r}"
            ref.append(_chdb_reference(native, db, rows))
            shutil.rmtree(db, ignore_errors=True)
            db = tmp / f"loader-{r}"
            cmd = [DYNCC, "ingest", "--from-file", str(path), "--clickhouse", f"chdb://{db}", "--metrics-port", "0"]
            t = time.perf_counter()
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            hwm = PeakRss(proc.pid)
            assert proc.stderr is not None
            err = proc.stderr.read()
            peak.append(_wait_rss(proc, hwm))
            wall.append(time.perf_counter() - t)
            found = _REPLAY.search(err)
            if proc.returncode != 0 or not found or f" {rows} rows in " not in err:
                raise SystemExit(f"loader failed ({proc.returncode}):\n{err[-3000:]}")
            loader.append(float(found.group(2)))
            shutil.rmtree(db, ignore_errors=True)
            print(
                f"  run {r + 1}: loader {loader[-1]:,.0f} rows/s (command {wall[-1]:.1f} s, peak RSS "
                f"{peak[-1]:.0f} MB); chDB Native insert {ref[-1]:,.0f} rows/s; ratio {loader[-1] / ref[-1]:.2f}"
            )

        def mr(xs: list[float], fmt: str) -> str:
            return f"{statistics.median(xs):{fmt}} [{min(xs):{fmt}}-{max(xs):{fmt}}]"

        ratio = [a / b for a, b in zip(loader, ref, strict=True)]
        print(f"\nrows {rows:,}, {runs} runs, median [range]")
        print(f"ingest --from-file -> chDB   {mr(loader, ',.0f')} rows/s  (target 300,000)")
        print(f"chDB Native-file insert      {mr(ref, ',.0f')} rows/s  (reference)")
        print(f"ratio loader / reference     {mr(ratio, '.2f')}")
        print(f"command wall time            {mr(wall, '.1f')} s; peak RSS {mr(peak, '.0f')} MB")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, help="rows (default 1000000; with --chdb-file 3000000)")
    ap.add_argument("--kafka", default=os.environ.get("DYNCC_TEST_KAFKA", "127.0.0.1:19092"))
    ap.add_argument(
        "--clickhouse",
        default=os.environ.get("DYNCC_TEST_CLICKHOUSE", "clickhouse://default:@127.0.0.1:19000/default"),
    )
    ap.add_argument("--keep", action="store_true", help="keep the benchmark databases and topic")
    ap.add_argument("--compression", default="zstd", choices=("none", "lz4", "zstd"), help="producer codec")
    ap.add_argument("--name-prefix", default="bench_ingest", help="prefix of the databases and topics made")
    ap.add_argument("--one-only", action="store_true", help="one loader only (no pre-sorted file, no two loaders)")
    ap.add_argument("--loader-args", default="", help="extra `dyncc ingest` options for the loaders")
    ap.add_argument("--chdb-file", action="store_true", help="benchmark --from-file into chDB instead (see above)")
    ap.add_argument("--runs", type=int, default=3, help="with --chdb-file: rounds")
    args = ap.parse_args()
    global NAME_PREFIX
    NAME_PREFIX = args.name_prefix
    if args.chdb_file:
        return chdb_file(args.rows or 3_000_000, args.runs)
    args.rows = args.rows or 1_000_000

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
        extra = args.loader_args.split()
        one = _loaders(1, args.kafka, admin, url1, msgs, args.rows, produce_cfg, extra)
        print(f"one loader:  {one:,.0f} rows/s")
        ref2 = reference(native)
        print(f"clickhouse-client native insert: {ref2:,.0f} rows/s")
        if args.one_only:
            ref = max(ref1, ref2)
            print(f"\nrows {args.rows:,}  clickhouse-client native {ref:,.0f} rows/s (runs: {ref1:,.0f}, {ref2:,.0f})")
            print(f"one loader  {one:,.0f} rows/s = {one / ref:.2f} x native  (bar 0.80)")
            if not args.keep:
                for url in dbs:
                    _drop(url)
            return 0 if one >= 0.8 * ref else 1
        sorted_runs = [reference(presorted) for _ in range(2)]
        print(f"clickhouse-client native insert, pre-sorted rows: {max(sorted_runs):,.0f} rows/s")
        url2 = _fresh_db(args.clickhouse, "two")
        dbs.append(url2)
        two = _loaders(2, args.kafka, admin, url2, msgs, args.rows, produce_cfg, extra)
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
