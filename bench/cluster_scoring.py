"""Benchmark a full scoring round on the ClickHouse cluster against one server, in the same run.

    python bench/cluster_scoring.py [--sizes 200000,1000000] [--runs 3] [--samples 6]
        [--cluster URL] [--clickhouse URL] [--stack-dir DIR] [--server-pid-file FILE]
        [--targets server,cluster] [--fill copy|compute] [--kept-cache] [--max-memory BYTES] [--keep]
        [--db-prefix P] [--lock FILE]

Per size and target (one server = the reference, then the cluster), in a fresh database:
  fill   tcpinfo_5m_nal (the default scoring's source) gets N prefixes x (36 + runs) five-minute
         buckets: the first by INSERT ... SELECT ...State(...) FROM numbers() (bench/scoring.py's
         fill, shared; on the cluster into the Distributed table, which sends each shard its
         rows), the others copies of it made on each shard (--fill copy; the two shards in
         parallel), or each computed like the first (--fill compute: several times slower; see
         docs/performance.md); then every replica is synced (SYSTEM SYNC REPLICA).  Copies make
         every bucket alike, which costs the scoring the same: it merges and ranks as many
         states either way;
  cold   the first run_round: the cache is computed from all 36 buckets, then score, decide
         and write every prefix to selections;
         --kept-cache: the cache is filled before it instead, as a loader's keeper
         (`dyncc ingest --cache-every`) leaves it: the first bucket computed, its rows copied to
         the others (not timed); the first round then builds its state from the kept cache (what
         a new controller on a store with data costs), without the 36-bucket merge;
  round  `runs` more run_rounds 5 minutes apart: each merges one new bucket into the cache,
         scores 36 buckets, decides against the previous state and writes (what every
         controller round costs).  Medians and ranges over these.
The rounds are a running controller's: each takes its previous state from the state the round
before it wrote (controller/scoring/state.py StateMemo), the first reads it from the store.
Per phase: run_round's timings (refresh, score, previous, decide, write; "other" = the rest, e.g.
the cluster's shard check).  CPU: utime + stime of every clickhouse-server process from
/proc/<pid>/stat before and after each step (pid files: $DYNCC_STACK_DIR/cluster/<node>/ for
the cluster nodes, --server-pid-file for the server), also over the replica sync that follows
a round on the cluster (the scoring cache, selections and outcomes are replicated to every
node: that work happens after the round returns); and the benchmark process's own CPU (decide
and write run in Python).  CPU figures are per million prefixes scored.
The box is shared: other processes' load shows in the wall times; a server's CPU includes any
other client's queries on it (the cluster of a dev env is the benchmark's alone, the one
server may not be).  At 1M prefixes the refresh of 4 buckets per INSERT needs more than the
test stack's 2 GiB per query on one server (the cluster's query node merges every shard's
groups too): --max-memory (6 GiB by default) raises it for the benchmark's queries.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import statistics
import sys
import time
import urllib.parse
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cluster_ingest import cpu_seconds
from bench.scoring import fill, peak_rss_mib, reset_peak_rss, state_reads, timed_section
from controller.scoring.query import window_for
from controller.scoring.round import RoundResult, run_round
from controller.scoring.settings import ScoringSettings
from controller.scoring.state import StateMemo
from controller.statistics import cache
from controller.statistics.source import Window
from controller.store import ClickHouseStore, ClusterStore, Store, open_store
from controller.store.migrate import apply_migrations
from controller.store.topology import shard_database

REPO = Path(__file__).resolve().parent.parent
POP = "bench1"
PHASES = ("refresh", "score", "previous", "decide", "write", "other")
#: the tables a round writes on the cluster (sharded or replicated to every node) and the fill's
SYNCED = ("scoring_cache", "scoring_versions", "scoring_state", "scoring_state_keys", "selections", "round_outcomes")
SYNC_TIMEOUT = 3600  # seconds


# ------------------------------------------------------------------ CPU of the servers


def read_pid(path: Path, expect: str) -> int | None:
    """The pid in a pid file when that process is a clickhouse-server whose command line has `expect`."""
    try:
        pid = int(path.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, ValueError):
        return None
    return pid if "clickhouse-server" in cmdline and expect in cmdline else None


class Meter:
    """CPU seconds of named server processes (and of this process) over a step."""

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = pids

    def sample(self) -> dict[str, float]:
        out = {name: cpu_seconds(pid) for name, pid in self.pids.items() if pid is not None}
        out["client"] = time.process_time()
        return out

    @staticmethod
    def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {name: after[name] - before[name] for name in before}


def node_pids(store: Store, stack_dir: Path, server_pid_file: Path) -> dict[str, int | None]:
    """Server process per node name: s<shard>r<replica> on a cluster (deploy/cluster.sh), else 'server'."""
    if not isinstance(store, ClusterStore):
        return {"server": read_pid(server_pid_file, "")}
    pids: dict[str, int | None] = {}
    for shard in store.topology().shards:
        for i, _ in enumerate(shard.replicas, start=1):
            node = f"s{shard.number}r{i}"
            pids[node] = read_pid(stack_dir / "cluster" / node / "clickhouse-server.pid", f"cluster/{node}/")
    return pids


# ------------------------------------------------------------------ steps


@dataclasses.dataclass
class Step:
    seconds: float
    cpu: dict[str, float]  # per server process and "client"
    phases: dict[str, float] = dataclasses.field(default_factory=dict)
    settle_seconds: float = 0.0
    settle_cpu: dict[str, float] = dataclasses.field(default_factory=dict)
    scored: int = 0


def measured(meter: Meter, body: Callable[[], Any]) -> tuple[Any, float, dict[str, float]]:
    before = meter.sample()
    started = time.perf_counter()
    value = body()
    seconds = time.perf_counter() - started
    return value, seconds, Meter.delta(before, meter.sample())


def sync_replicas(store: Store, tables: tuple[str, ...]) -> None:
    """SYSTEM SYNC REPLICA of `tables` (sharded ones in the shard database) on every node; nothing on one server."""
    if not isinstance(store, ClusterStore):
        return
    for replica in store.topology().nodes():
        url = store.node_url(replica, "default")
        # the sync waits for the replica's whole queue (fetches and merges): minutes at 1M prefixes
        node = ClickHouseStore(dataclasses.replace(url, timeout=float(SYNC_TIMEOUT)))
        try:
            for database in (store.database, shard_database(store.database)):
                rows = node.query_rows(
                    "SELECT name FROM system.tables WHERE database = %(d)s AND engine LIKE 'Replicated%%'",
                    {"d": database},
                )
                for (name,) in rows:
                    if str(name) in tables:
                        node.execute(f"SYSTEM SYNC REPLICA {database}.{name}")
        finally:
            node.close()


def a_round(store: Store, meter: Meter, cfg: ScoringSettings, when: dt.datetime, memo: StateMemo) -> Step:
    """One round of a running controller (`memo`: the state its round before wrote)."""
    result: RoundResult
    result, seconds, cpu = measured(meter, lambda: run_round(store, cfg, when, POP, memo=memo))
    phases = {k: result.timings.get(k, 0.0) for k in PHASES if k != "other"}
    phases["other"] = result.seconds - sum(phases.values())
    _, settle, settle_cpu = measured(meter, lambda: sync_replicas(store, SYNCED))
    return Step(seconds, cpu, phases, settle, settle_cpu, scored=int(result.decisions.shape[0]))


@dataclasses.dataclass
class Run:
    target: str
    size: int
    buckets: int
    nodes: list[str]
    fill: Step
    cold: Step
    rounds: list[Step]
    rss_mib: float = 0.0  # peak RSS of this process over the rounds
    kept_cache: bool = False  # the cache filled before the first round (--kept-cache)
    state_read: list[float] = dataclasses.field(default_factory=list)  # the floor: plain reads of the state
    state_rows: int = 0


COPY_CACHE_SQL = """
INSERT INTO scoring_cache
SELECT pop, source, %(to)s AS copied_bucket, version, prefix, family, samples, qualifying, stat, low, rtt
FROM scoring_cache
WHERE source = %(source)s AND bucket = %(from)s
"""


def keep_cache(store: Store, cfg: ScoringSettings, now: dt.datetime) -> None:
    """The cache of the window at `now` as a keeper leaves it: the first bucket computed (on every
    shard), copied to the window's other buckets (on every shard) and their versions recorded."""
    window = window_for(now, cfg)
    first = Window(window.start, window.start + dt.timedelta(seconds=cfg.bucket_seconds), cfg.bucket_seconds)
    version = time.time_ns()
    (key,) = cache.refresh(store, cfg.cache_source, first, POP, version)
    samples = store.query_rows(
        "SELECT samples FROM scoring_versions WHERE source = %(source)s AND version = %(version)s",
        {"source": cfg.source, "version": version},
    )[0][0]
    others = [window.start + dt.timedelta(seconds=cfg.bucket_seconds * i) for i in range(1, window.buckets)]

    def copy_on(shard: Store) -> None:
        for bucket in others:
            shard.execute(COPY_CACHE_SQL, {"to": bucket, "from": window.start, "source": cfg.source})

    cache.on_every_shard(store, copy_on)
    cache.record_versions(
        store,
        cfg.cache_source,
        [(POP, key.bucket_ts + cfg.bucket_seconds * i) for i in range(1, window.buckets)],
        version,
        [int(samples)] * len(others),
    )


def bench_target(
    target: str,
    url: str,
    size: int,
    runs: int,
    samples: int,
    copy: bool,
    max_memory: int,
    stack_dir: Path,
    pid_file: Path,
    keep: bool,
    db_prefix: str = "bench",
    lock: str = "",
    kept_cache: bool = False,
) -> Run:
    cfg = ScoringSettings()
    now = dt.datetime(2024, 3, 1, 12, 0, 10, tzinfo=dt.UTC)
    store = open_store(url.replace("{db}", f"{db_prefix}_{uuid.uuid4().hex[:8]}"))
    try:
        apply_migrations(store)
        if max_memory:  # for this connection's queries (and on a cluster the shards' parts of them)
            store.execute(f"SET max_memory_usage = {int(max_memory)}")
        pids = node_pids(store, stack_dir, pid_file)
        missing = [name for name, pid in pids.items() if pid is None]
        if missing:
            print(f"  {target}: no server process found for {', '.join(missing)}: its CPU is not measured", flush=True)
        meter = Meter(pids)
        buckets = cfg.lookback_seconds // cfg.bucket_seconds + runs
        last_end = now + dt.timedelta(minutes=5 * runs)
        end = dt.datetime.fromtimestamp(int(last_end.timestamp()) // 300 * 300, dt.UTC)

        _, seconds, cpu = measured(meter, lambda: fill(store, size, buckets, end, samples, copy, both=False))
        if kept_cache:
            _, kept, _ = measured(meter, lambda: keep_cache(store, cfg, now))
            print(f"  {target} {size}: cache kept (first bucket computed, copied) in {kept:.1f}s", flush=True)
        synced = ("tcpinfo_5m_nal", "scoring_cache", "scoring_versions") if kept_cache else ("tcpinfo_5m_nal",)
        _, settle, settle_cpu = measured(meter, lambda: sync_replicas(store, synced))
        filled = Step(seconds, cpu, settle_seconds=settle, settle_cpu=settle_cpu)
        print(
            f"  {target} {size}: filled {buckets} buckets in {seconds:.1f}s, replicas synced in {settle:.1f}s",
            flush=True,
        )
        with timed_section(lock):
            reset_peak_rss()
            memo = StateMemo()
            cold = a_round(store, meter, cfg, now, memo)
            first = "first round on the kept cache" if kept_cache else "cold round"
            print(f"  {target} {size}: {first} {cold.seconds:.1f}s {_phases(cold)}", flush=True)
            rounds = []
            for i in range(1, runs + 1):
                step = a_round(store, meter, cfg, now + dt.timedelta(minutes=5 * i), memo)
                rounds.append(step)
                print(f"  {target} {size}: round {i} {step.seconds:.2f}s {_phases(step)}", flush=True)
            reads, read_rows = state_reads(store, runs)
        nodes = [n for n, p in pids.items() if p is not None]
        return Run(target, size, buckets, nodes, filled, cold, rounds, peak_rss_mib(), kept_cache, reads, read_rows)
    finally:
        if not keep:
            _drop(store)
        store.close()


def _drop(store: Store) -> None:
    store.drop_database()  # type: ignore[attr-defined]


# ------------------------------------------------------------------ report


def _phases(step: Step) -> str:
    return "[" + " ".join(f"{k} {step.phases.get(k, 0.0):.2f}s" for k in PHASES) + "]"


def _median_range(values: list[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "-"
    text = fmt.format(statistics.median(values))
    if len(values) > 1:
        text += f" ({fmt.format(min(values))}-{fmt.format(max(values))})"
    return text


def _per_million(cpu: float, prefixes: int) -> float:
    return cpu / prefixes * 1e6


def describe(run: Run) -> list[str]:
    servers = run.nodes
    lines = [f"{run.target} prefixes={run.size} (medians over {len(run.rounds)} rounds, range in brackets)"]
    fill_cpu = {n: run.fill.cpu[n] + run.fill.settle_cpu.get(n, 0.0) for n in servers}
    lines.append(
        f"  fill {run.fill.seconds:.1f}s + replica sync {run.fill.settle_seconds:.1f}s, server CPU "
        + ", ".join(f"{n} {fill_cpu[n]:.1f}s" for n in servers)
        + f" ({_per_million(sum(fill_cpu.values()), run.size * run.buckets):.2f} s per 1M rollup rows)"
    )
    first = "first round on the kept cache" if run.kept_cache else "cold round"
    lines.append(f"  {first} {run.cold.seconds:.2f}s {_phases(run.cold)}")
    lines.append(
        f"  round {_median_range([r.seconds for r in run.rounds])}s: "
        + ", ".join(f"{k} {_median_range([r.phases[k] for r in run.rounds])}s" for k in PHASES)
    )
    for label, get in (("during the round", lambda r: r.cpu), ("replica sync after it", lambda r: r.settle_cpu)):
        per_node = ", ".join(
            f"{n} {_median_range([_per_million(get(r).get(n, 0.0), r.scored) for r in run.rounds])}" for n in servers
        )
        total = [_per_million(sum(get(r).get(n, 0.0) for n in servers), r.scored) for r in run.rounds]
        lines.append(f"  server CPU s per 1M prefixes {label}: {per_node}; all nodes {_median_range(total)}")
    client = [_per_million(r.cpu["client"], r.scored) for r in run.rounds]
    settle = [r.settle_seconds for r in run.rounds]
    lines.append(
        f"  client (python) CPU s per 1M prefixes {_median_range(client)}; replica sync {_median_range(settle)}s; "
        f"peak RSS of the controller over the rounds {run.rss_mib:.0f} MiB"
    )
    if run.state_read:
        floor = statistics.median(run.state_read)
        lines.append(
            f"  plain state read (one row per prefix, into pandas) {_median_range(run.state_read)}s "
            f"({run.state_rows} rows): round x{statistics.median([r.seconds for r in run.rounds]) / floor:.1f} of it, "
            f"cold x{run.cold.seconds / floor:.1f}"
        )
    return lines


def ratios(cluster: Run, server: Run) -> list[str]:
    def med(run: Run, get: Callable[[Step], float]) -> float:
        return statistics.median(get(r) for r in run.rounds)

    def ratio(a: float, b: float) -> str:
        return f"x{a / b:.2f}" if b > 0 else "-"

    def phase(name: str) -> Callable[[Step], float]:
        return lambda r: r.phases[name]

    lines = [f"cluster / server at {cluster.size} prefixes (median round):"]
    lines.append(
        f"  wall {ratio(med(cluster, lambda r: r.seconds), med(server, lambda r: r.seconds))}; "
        + ", ".join(f"{k} {ratio(med(cluster, phase(k)), med(server, phase(k)))}" for k in PHASES)
    )
    cpu_c = med(cluster, lambda r: sum(v for n, v in r.cpu.items() if n != "client"))
    cpu_s = med(server, lambda r: sum(v for n, v in r.cpu.items() if n != "client"))
    sync_c = med(cluster, lambda r: sum(v for n, v in r.settle_cpu.items() if n != "client"))
    lines.append(
        f"  server CPU during the round {ratio(cpu_c, cpu_s)} (all nodes together); "
        f"with the replica sync after it {ratio(cpu_c + sync_c, cpu_s)}"
    )
    cold, filled = ratio(cluster.cold.seconds, server.cold.seconds), ratio(cluster.fill.seconds, server.fill.seconds)
    lines.append(f"  cold round wall {cold}; fill {filled}")
    return lines


def _with_db(url: str) -> str:
    """The URL with its database replaced by {db} (query string kept)."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path="/{db}"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="200000,1000000", help="prefixes per run, comma-separated")
    ap.add_argument("--runs", type=int, default=3, help="rounds measured after the cold one")
    ap.add_argument("--samples", type=int, default=6, help="samples per prefix and bucket")
    ap.add_argument("--targets", default="server,cluster", help="which of server,cluster to run")
    ap.add_argument(
        "--fill",
        choices=("copy", "compute"),
        default="copy",
        help="compute every bucket, or compute one and copy its rows to the others (faster) [default: copy]",
    )
    ap.add_argument(
        "--cluster",
        default=os.environ.get("DYNCC_TEST_CLUSTER", "clickhouse://default:@127.0.0.1:19101/default?cluster=dyncc"),
        help="cluster store URL (its database is replaced by a fresh one) [default: $DYNCC_TEST_CLUSTER]",
    )
    ap.add_argument(
        "--clickhouse",
        default=os.environ.get("DYNCC_TEST_CLICKHOUSE", "clickhouse://default:@127.0.0.1:19000/default"),
        help="the one-server reference [default: $DYNCC_TEST_CLICKHOUSE]",
    )
    stack = Path(os.environ.get("DYNCC_STACK_DIR", REPO / ".stack"))
    ap.add_argument("--stack-dir", type=Path, default=stack, help="the cluster's state dir [default: $DYNCC_STACK_DIR]")
    ap.add_argument(
        "--server-pid-file",
        type=Path,
        default=REPO / ".stack" / "clickhouse" / "clickhouse-server.pid",
        help="pid file of the one server (deploy/stack.sh) [default: .stack/clickhouse/clickhouse-server.pid]",
    )
    ap.add_argument(
        "--max-memory",
        type=int,
        default=6 << 30,
        help="max_memory_usage (bytes) for the benchmark's queries; 0 = the server's (2 GiB on the test "
        "stack: a refresh of 4 buckets of 1M prefixes needs more) [default: 6 GiB]",
    )
    ap.add_argument(
        "--kept-cache",
        action="store_true",
        help="fill the scoring cache before the first round as a loader's keeper leaves it (no 36-bucket merge)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the benchmark databases")
    ap.add_argument(
        "--lock", default="", help="hold flock on this file over the timed rounds only (not the fill) [default: none]"
    )
    ap.add_argument(
        "--db-prefix", default="bench", help="the benchmark databases' name: PREFIX_<random> [default: bench]"
    )
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    targets = [t for t in args.targets.split(",") if t]
    urls = {"server": _with_db(args.clickhouse), "cluster": _with_db(args.cluster)}
    for size in sizes:
        done: dict[str, Run] = {}
        for target in targets:
            done[target] = bench_target(
                target,
                urls[target],
                size,
                args.runs,
                args.samples,
                args.fill == "copy",
                args.max_memory,
                args.stack_dir,
                args.server_pid_file,
                args.keep,
                args.db_prefix,
                args.lock,
                args.kept_cache,
            )
            print("\n".join(describe(done[target])), flush=True)
        if "server" in done and "cluster" in done:
            print("\n".join(ratios(done["cluster"], done["server"])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
