"""Cluster ingest benchmark: Kafka -> `dyncc ingest` -> the ClickHouse cluster vs one server, and
the cluster's two ways of inserting the rows.

    python bench/cluster_ingest.py [--rows 1000000] [--runs 3] [--kafka 127.0.0.1:19092]
        [--clickhouse clickhouse://default:@127.0.0.1:19000/default]
        [--cluster clickhouse://default:@127.0.0.1:19101/default?cluster=dyncc] [--zk-port 19181]

Not part of the test suite.  The data is bench/ingest.py's: ROWS rows of realistic columns
(tests.support.ingest_synth) from 8 hosts, one message per poll of 280 sockets, produced
zstd-compressed (level 1) to a topic of 4 partitions.  Every load gets a fresh topic, consumer
group and database (the cluster's: schema applied on every node), and the same messages.  One
load into the single server comes first to warm the broker, the page cache and the servers (not
counted).  Then, RUNS times, in this order:

  single       one `dyncc ingest --drain` into the single server: the reference of that run;
  routed       one `dyncc ingest --drain` into the cluster: the loader routes every row to its
               shard itself (one insert per shard, on the shard's first replica), as the code does;
  distributed  the same loader with the rows' insert replaced by ONE insert of the whole group
               into the Distributed tcpinfo on the query node, insert_distributed_sync=1 (the
               query node splits the rows by the sharding key and forwards the other shard's);
  routed x2    two `dyncc ingest` into the cluster, started first; the messages are produced
               once both hold partitions and they get SIGTERM once every row is in.

A rate is rows over the loaders' window (first message consumed -> last flush committed, from
the loader's closing log line; two loaders: the union of their windows), as bench/ingest.py
measures it.  CPU: utime + stime (/proc/<pid>/stat) of each server (the four cluster nodes,
ZooKeeper, the single server), found by the TCP port they listen on, read before the loader
starts and after the load once SYSTEM SYNC REPLICA on every replica has the new parts
(replication is part of the cluster's cost; merges still running then are not counted).  The
loaders' CPU is that of their processes (getrusage of the waited children) less the CPU of a
loader's start-up and shut-down, measured as `dyncc ingest --drain` on an empty topic.
Printed per scenario: the median and range over the runs of rows/s, of its ratio to `single`
of the same run, and of CPU seconds per million rows of every process.  A server's CPU counts
whatever else it serves meanwhile: give --clickhouse a server nobody else is using (e.g. one
started by deploy/clickhouse/clickhouse.sh with its own DYNCC_STACK_DIR and ports).

`--loader-distributed ARGS...` is the internal entry of the `distributed` scenario: `dyncc
ingest ARGS` with BatchWriter's row insert replaced as described.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka.admin import AdminClient

from bench.ingest import new_topic, produce
from controller.store import ClusterStore, Store, open_store
from controller.store.migrate import apply_migrations
from controller.store.topology import shard_database
from schemas.tcpinfo_columns import DEFAULT_MAX_BYTES
from tests.support.ingest_synth import synth_messages

_RATE = re.compile(r"loaded (\d+) rows in [\d.]+ s \(first message ([\d.]+) -> last flush ([\d.]+)\)")
DISTRIBUTED_FLAG = "--loader-distributed"
TICKS = os.sysconf("SC_CLK_TCK")
Messages = list[tuple[str, bytes]]


# ------------------------------------------------------------------ the `distributed` loader


def loader_distributed(args: Sequence[str]) -> int:
    """`dyncc ingest ARGS` whose rows go in one insert into the Distributed tcpinfo of the query node."""
    from controller.ingest.columns import Prepared
    from controller.ingest.writer import TABLE, BatchWriter
    from dyncc.cli import main as cli_main

    def insert_distributed(self: BatchWriter, prepared: Prepared, rows: int, block: Any = None) -> None:
        assert isinstance(self.store, ClusterStore)
        # ClusterStore's connections carry insert_distributed_sync=1: the insert returns once
        # every shard has its rows
        self.store.bulk_insert(TABLE, prepared, rows)

    BatchWriter._insert_rows = insert_distributed  # type: ignore[method-assign]
    return cli_main(["ingest", *args])


# ------------------------------------------------------------------ servers and their CPU


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                    inodes.add(parts[9])
    return inodes


def pid_listening(port: int) -> int:
    """The process listening on 127.0.0.1:`port` (one of this user's)."""
    sockets = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if sockets:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
                if any(os.readlink(f"/proc/{pid}/fd/{fd}") in sockets for fd in fds):
                    return int(pid)
            except OSError:
                continue
    raise SystemExit(f"no process of this user listens on port {port}")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# ------------------------------------------------------------------ stores


def _db_url(base: str, database: str) -> str:
    head, _, tail = base.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{database}" + (f"?{tail}" if tail else "")


def fresh_db(base: str, tag: str) -> str:
    url = _db_url(base, f"bench_cingest_{tag}_{uuid.uuid4().hex[:8]}")
    store = open_store(url)
    try:
        apply_migrations(store)
    finally:
        store.close()
    return url


def drop_db(url: str) -> None:
    store = open_store(url)
    try:
        store.drop_database()  # type: ignore[attr-defined]
    finally:
        store.close()


def count(url: str) -> int:
    store = open_store(url)
    try:
        return int(store.query_rows("SELECT count() FROM tcpinfo")[0][0])
    finally:
        store.close()


def sync_replicas(url: str) -> None:
    """Wait until every replica of the cluster has fetched the parts of the sharded tables."""
    store = open_store(url)
    try:
        if not isinstance(store, ClusterStore):
            return
        for replica in store.topology().nodes():
            node: Store = store.node_store(replica, shard_database(store.database))
            try:
                for table in ("tcpinfo", "tcpinfo_5m", "ingest_batches"):
                    node.execute(f"SYSTEM SYNC REPLICA {table}")
            finally:
                node.close()
    finally:
        store.close()


# ------------------------------------------------------------------ Kafka and loaders


def startup_cpu(kafka: str, admin: AdminClient, url: str) -> float:
    """CPU seconds of a `dyncc ingest --drain` that finds nothing to load: start-up and shut-down."""
    topic = new_topic(admin)
    cmd = [sys.executable, "-m", "dyncc.cli", "ingest", "--kafka", kafka, "--topic", topic]
    cmd += ["--group", f"bench-{uuid.uuid4().hex[:8]}", "--clickhouse", url, "--metrics-port", "0"]
    child0 = children_cpu()
    try:
        subprocess.run([*cmd, "--no-migrate", "--drain"], check=True, stderr=subprocess.DEVNULL, timeout=120)
    finally:
        for done in admin.delete_topics([topic]).values():
            done.result(timeout=30)
    return children_cpu() - child0


@dataclass
class Load:
    """One measured load."""

    rows_per_s: float
    loader_cpu: float  # seconds, all loader processes, their start-up included
    loaders: int
    node_cpu: dict[str, float]  # seconds per server process


def run_loaders(
    n: int,
    kafka: str,
    admin: AdminClient,
    url: str,
    msgs: Messages,
    rows: int,
    servers: Mapping[str, int],
    distributed: bool = False,
) -> Load:
    """n loaders on a fresh topic into `url` (a fresh database); servers: name -> pid whose CPU is counted."""
    topic = new_topic(admin)
    group = f"bench-{uuid.uuid4().hex[:8]}"
    if n == 1:
        produce(kafka, topic, msgs)
    ingest = ["--kafka", kafka, "--topic", topic, "--group", group, "--clickhouse", url]
    ingest += ["--metrics-port", "0", "--no-migrate"] + (["--drain"] if n == 1 else [])
    if distributed:
        cmd = [sys.executable, str(Path(__file__).resolve()), DISTRIBUTED_FLAG, *ingest]
    else:
        cmd = [sys.executable, "-m", "dyncc.cli", "ingest", *ingest]
    node0 = {name: cpu_seconds(pid) for name, pid in servers.items()}
    child0 = children_cpu()
    logs = [Path(tempfile.gettempdir()) / f"bench_cingest_{group}_{i}.log" for i in range(n)]
    procs = []
    for log in logs:
        with open(log, "w") as f:
            procs.append(subprocess.Popen(cmd, stderr=f, cwd=Path(__file__).resolve().parent.parent))
    try:
        if n > 1:
            wait_until(lambda: all_assigned(topic, logs), 60, "loaders holding partitions")
            produce(kafka, topic, msgs)
        deadline = time.monotonic() + 600
        while count(url) < rows and procs[0].poll() is None:
            if time.monotonic() > deadline:
                raise SystemExit("loaders did not load every row within 600 s")
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            p.wait(60)
        for done in admin.delete_topics([topic]).values():
            done.result(timeout=30)
    loader_cpu = children_cpu() - child0
    sync_replicas(url)
    node_cpu = {name: cpu_seconds(pid) - node0[name] for name, pid in servers.items()}
    windows, loaded = [], 0
    for p, log in zip(procs, logs, strict=True):
        err = log.read_text()
        log.unlink()
        m = _RATE.search(err)
        if p.returncode != 0 or not m:
            raise SystemExit(f"loader failed ({p.returncode}):\n{err[-3000:]}")
        loaded += int(m.group(1))
        windows.append((float(m.group(2)), float(m.group(3))))
    got = count(url)
    if got != rows or loaded != rows:
        raise SystemExit(f"expected {rows} rows, the table has {got}, the loaders reported {loaded}")
    span = max(w[1] for w in windows) - min(w[0] for w in windows)
    return Load(rows / span, loader_cpu, n, node_cpu)


def all_assigned(topic: str, logs: list[Path]) -> bool:
    texts = [log.read_text() for log in logs]
    return all(f"assigned {topic}[" in t for t in texts) and not any(
        t.rfind("revoked") > t.rfind("assigned") for t in texts
    )


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


# ------------------------------------------------------------------ report


@dataclass
class Scenario:
    name: str
    loads: list[Load] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)


def spread(values: Sequence[float], fmt: str) -> str:
    """median [min - max]"""
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"


def report(scenarios: list[Scenario], rows: int, startup: float) -> None:
    per_m = 1e6 / rows
    print()
    print(f"rows {rows:,}, {len(scenarios[0].loads)} runs: median [min-max]")
    print(f"{'scenario':<12} {'rows/s':<28} {'x single':<20}")
    for s in scenarios:
        rates = [load.rows_per_s for load in s.loads]
        print(f"{s.name:<12} {spread(rates, ',.0f'):<28} {spread(s.ratios, '.2f'):<20}")
    by_name = {s.name: [load.rows_per_s for load in s.loads] for s in scenarios}
    for a, b in (("distributed", "routed"), ("routed x2", "routed")):
        ratios = [x / y for x, y in zip(by_name[a], by_name[b], strict=True)]
        print(f"{a} / {b}: {spread(ratios, '.2f')}")
    print()
    print(
        f"CPU seconds per million rows, median [min-max]; loader: its processes' CPU less a start-up "
        f"of {startup:.2f} s each (`dyncc ingest --drain` on an empty topic)"
    )
    for s in scenarios:
        loader = [(load.loader_cpu - startup * load.loaders) * per_m for load in s.loads]
        parts = [f"loader {spread(loader, '.2f')}"]
        names = list(s.loads[0].node_cpu)
        for name in names:
            parts.append(f"{name} {spread([load.node_cpu[name] * per_m for load in s.loads], '.2f')}")
        servers = [sum(load.node_cpu.values()) * per_m for load in s.loads]
        everything = [
            (sum(load.node_cpu.values()) + load.loader_cpu - startup * load.loaders) * per_m for load in s.loads
        ]
        parts.append(f"servers {spread(servers, '.2f')}")
        parts.append(f"all {spread(everything, '.2f')}")
        print(f"  {s.name:<12} " + "; ".join(parts))


# ------------------------------------------------------------------ main


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == DISTRIBUTED_FLAG:
        return loader_distributed(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kafka", default=os.environ.get("DYNCC_TEST_KAFKA", "127.0.0.1:19092"))
    ap.add_argument(
        "--clickhouse",
        default=os.environ.get("DYNCC_TEST_CLICKHOUSE", "clickhouse://default:@127.0.0.1:19000/default"),
        help="the single server",
    )
    ap.add_argument(
        "--cluster",
        default=os.environ.get("DYNCC_TEST_CLUSTER", "clickhouse://default:@127.0.0.1:19101/default?cluster=dyncc"),
        help="the cluster (its query node)",
    )
    ap.add_argument(
        "--zk-port", type=int, default=int(os.environ.get("DYNCC_ZK_PORT", "19181")), help="the cluster's ZooKeeper"
    )
    args = ap.parse_args()

    t0 = time.perf_counter()
    msgs = list(synth_messages(args.rows, hosts=8, rows_per_poll=280, seed=42, max_bytes=DEFAULT_MAX_BYTES))
    total_bytes = sum(len(m) for _, m in msgs)
    print(
        f"made {args.rows} rows in {len(msgs)} messages ({total_bytes / len(msgs) / 1024:.1f} KiB each, "
        f"{total_bytes / 1e6:.0f} MB) in {time.perf_counter() - t0:.1f} s"
    )
    single_url = open_store(args.clickhouse)
    single_servers = {"single": pid_listening(single_url.url.port)}
    single_url.close()
    cluster = open_store(args.cluster)
    if not isinstance(cluster, ClusterStore):
        raise SystemExit(f"--cluster {args.cluster}: not a cluster URL (?cluster=NAME)")
    nodes = {}
    for shard in cluster.topology().shards:
        for i, replica in enumerate(shard.replicas):
            nodes[f"s{shard.number}r{i + 1}"] = pid_listening(replica.port)
    cluster.close()
    nodes["zk"] = pid_listening(args.zk_port)
    print(f"servers: single {single_servers['single']}; cluster {nodes}")
    admin = AdminClient({"bootstrap.servers": args.kafka})

    def load(name: str, base: str, servers: Mapping[str, int], loaders: int = 1, distributed: bool = False) -> Load:
        url = fresh_db(base, re.sub(r"\W", "", name))
        try:
            result = run_loaders(loaders, args.kafka, admin, url, msgs, args.rows, servers, distributed)
        finally:
            drop_db(url)
        print(
            f"  {name:<12} {result.rows_per_s:>10,.0f} rows/s, CPU s: loader {result.loader_cpu:.2f}, "
            + ", ".join(f"{k} {v:.2f}" for k, v in result.node_cpu.items())
        )
        return result

    print("warm-up (not counted):")
    load("warm-up", args.clickhouse, single_servers)
    startup = statistics.median(startup_cpu(args.kafka, admin, args.cluster) for _ in range(3))
    print(f"  loader start-up: {startup:.2f} s CPU")
    scenarios = [Scenario(n) for n in ("single", "routed", "distributed", "routed x2")]
    for run in range(args.runs):
        print(f"run {run + 1}:")
        ref = load("single", args.clickhouse, single_servers)
        got = [
            ref,
            load("routed", args.cluster, nodes),
            load("distributed", args.cluster, nodes, distributed=True),
            load("routed x2", args.cluster, nodes, loaders=2),
        ]
        for s, result in zip(scenarios, got, strict=True):
            s.loads.append(result)
            s.ratios.append(result.rows_per_s / ref.rows_per_s)
    report(scenarios, args.rows, startup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
