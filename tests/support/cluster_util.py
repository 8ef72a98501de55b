"""Helpers of the cluster ingest tests: what the cluster and each shard hold, node control, loaders.

* expected_rows(): the (host, run_id, sequence, cookie) of every row of some messages;
* loaded_rows(): the same key of every row the cluster holds, read through the Distributed table;
* shard_placement(): per shard, the (pop, prefix) pairs its own tcpinfo holds, with the server's
  sharding key of each (computed on that shard); misplaced(): the rows on another shard than
  topology.shard_of() says, or whose server key differs from topology.shard_key();
* ledger_mismatches(): per shard, the batches whose ledger rows disagree with the shard's rows;
* node_answers(): whether a replica's server answers;
* node_name() / cluster_node(): the deploy/cluster.sh name of a replica, and stop-node / start-node
  with the caller's environment (the cluster's ports and state directory come from it);
* with_alt_hosts(): a store URL with alternative hosts for its query node;
* LoaderProcess: `dyncc ingest` as a subprocess (SIGKILL, SIGTERM, its log).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from controller.store import ClusterStore, StoreError, open_store
from controller.store.topology import Replica, shard_database, shard_key, shard_of
from schemas.tcpinfo_decode import decode_batch

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO / "deploy" / "cluster.sh"

RowKey = tuple[str, int, int, int]
BatchKey = tuple[str, int, int]


def expected_rows(messages: list[tuple[str, bytes]]) -> Counter[RowKey]:
    """Every row of the messages as (host, run_id, sequence, cookie), with multiplicity."""
    out: Counter[RowKey] = Counter()
    for _, value in messages:
        b = decode_batch(value)
        for cookie in b.columns["cookie"].tolist():
            out[(b.host, int(b.run_id), int(b.sequence), int(cookie))] += 1
    return out


def loaded_rows(url: str) -> Counter[RowKey]:
    """Every row in the cluster's tcpinfo (the Distributed table: all shards) as expected_rows() keys it."""
    sync_replicas(url)  # a Distributed read may go to either replica of a shard
    store = open_store(url)
    try:
        rows = store.query_rows(
            "SELECT host, run_id, sequence, cookie, count() FROM tcpinfo GROUP BY host, run_id, sequence, cookie"
        )
    finally:
        store.close()
    return Counter({(str(h), int(r), int(s), int(c)): int(n) for h, r, s, c, n in rows})


Placement = dict[tuple[str, str], tuple[int, int, int]]


def shard_placement(store: ClusterStore) -> list[Placement]:
    """Per shard (0-based): (pop, prefix) -> (rows, key, key % total weight) of the shard's own tcpinfo,
    key being the server's halfMD5(concat(pop, '/', prefix)), computed on that shard."""
    total = sum(store.shard_weights())
    sql = (
        "SELECT pop, prefix, count(), any(halfMD5(concat(pop, '/', prefix))), "
        f"any(halfMD5(concat(pop, '/', prefix)) % {total}) FROM tcpinfo GROUP BY pop, prefix"
    )
    out = []
    for shard in store.shard_stores():
        out.append({(str(p), str(x)): (int(n), int(k), int(m)) for p, x, n, k, m in shard.query_rows(sql)})
    return out


def misplaced(store: ClusterStore) -> list[str]:
    """Rows on a shard other than topology.shard_of(pop, prefix), or whose server key differs from shard_key()."""
    weights = store.shard_weights()
    problems = []
    for index, pairs in enumerate(shard_placement(store)):
        for (pop, prefix), (rows, server_key, _) in sorted(pairs.items()):
            if server_key != shard_key(pop, prefix):
                problems.append(f"shard {index}: {pop}/{prefix}: server key {server_key} != {shard_key(pop, prefix)}")
            if shard_of(pop, prefix, weights) != index:
                problems.append(
                    f"shard {index} holds {rows} rows of {pop}/{prefix} (shard_of: {shard_of(pop, prefix, weights)})"
                )
    return problems


def ledger_mismatches(store: ClusterStore) -> list[str]:
    """Per shard, batches whose ledger entries are not exactly one entry with the shard's row count."""
    problems = []
    for index, shard in enumerate(store.shard_stores()):
        held = {
            (str(h), int(r), int(s)): int(n)
            for h, r, s, n in shard.query_rows(
                "SELECT host, run_id, sequence, count() FROM tcpinfo GROUP BY host, run_id, sequence"
            )
        }
        ledger = {
            (str(h), int(r), int(s)): (int(e), int(n))
            for h, r, s, e, n in shard.query_rows(
                "SELECT host, run_id, sequence, count(), sum(rows) FROM ingest_batches GROUP BY host, run_id, sequence"
            )
        }
        for key in sorted(held.keys() | ledger.keys()):
            rows = held.get(key, 0)
            entries, ledger_rows = ledger.get(key, (0, 0))
            if rows and (entries, ledger_rows) != (1, rows):
                problems.append(f"shard {index} batch {key}: {rows} rows, ledger {entries} entries of {ledger_rows}")
            elif not rows and ledger_rows:
                problems.append(f"shard {index} batch {key}: no rows, ledger says {ledger_rows}")
    return problems


def node_name(store: ClusterStore, replica: Replica) -> str:
    """deploy/cluster.sh's name of a replica: s<shard>r<replica>, both 1-based, in system.clusters order."""
    for shard in store.topology().shards:
        if replica in shard.replicas:
            return f"s{shard.number}r{shard.replicas.index(replica) + 1}"
    raise KeyError(replica)


def node_answers(store: ClusterStore, replica: Replica) -> bool:
    """Whether the replica's server answers a query."""
    node = store.node_store(replica, "default")
    try:
        node.version()
        return True
    except StoreError:
        return False
    finally:
        node.close()


def cluster_node(action: str, node: str) -> None:
    """`deploy/cluster.sh stop-node|start-node NODE` with this process's environment."""
    done = subprocess.run(
        ["bash", str(CLUSTER_SH), action, node], env=os.environ, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, f"cluster.sh {action} {node}: {done.stderr[-2000:]}"


def with_alt_hosts(url: str, *replicas: Replica) -> str:
    """The store URL `url` with `replicas` as its alt_hosts (tried when the query node does not answer)."""
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query))
    query["alt_hosts"] = ",".join(str(r) for r in replicas)
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


class LoaderProcess:
    """`dyncc ingest ARGS` as a subprocess, its stderr in a file (read with .log)."""

    def __init__(self, log_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 (closed in wait())
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dyncc.cli", "ingest", "--metrics-port", "0", *args],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            env={**os.environ, **(env or {})},
        )

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> int:
        """SIGKILL; the exit status."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        return self.wait(30)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (a clean stop); the exit status (SIGKILL and TimeoutExpired after `timeout`)."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float) -> int:
        """The exit status; SIGKILL and TimeoutExpired when the process runs longer than `timeout`."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self._log.close()


def sync_replicas(url: str) -> None:
    """SYSTEM SYNC REPLICA of every replicated table of the URL's databases, on every node."""
    store = open_store(url)
    assert isinstance(store, ClusterStore)
    try:
        databases = (store.database, shard_database(store.database))
        for replica in store.topology().nodes():
            node = store.node_store(replica, "default")
            try:
                rows = node.query_rows(
                    "SELECT database, name FROM system.tables WHERE database IN (%(a)s, %(b)s) "
                    "AND engine LIKE 'Replicated%%'",
                    {"a": databases[0], "b": databases[1]},
                )
                for database, table in rows:
                    node.execute(f"SYSTEM SYNC REPLICA {database}.{table}")
            finally:
                node.close()
    finally:
        store.close()


@contextlib.contextmanager
def shard_table_renamed(cluster: ClusterStore, shard: int, old: str, new: str) -> Iterator[None]:
    """A sharded table renamed on every replica of a shard (0-based), named back afterwards
    (inserts routed to that shard fail meanwhile)."""

    def rename(a: str, b: str) -> None:
        for replica in cluster.topology().shards[shard].replicas:
            node = cluster.node_store(replica, shard_database(cluster.database))
            try:
                node.execute(f"RENAME TABLE {a} TO {b}")
            finally:
                node.close()

    rename(old, new)
    try:
        yield
    finally:
        rename(new, old)


def node_tables(store: ClusterStore) -> dict[str, set[tuple[str, str, str]]]:
    """Per node: the (database, name, engine) of every table of the store's two databases."""
    out = {}
    for replica in store.topology().nodes():
        node = store.node_store(replica, "default")
        try:
            rows = node.query_rows(
                "SELECT database, name, engine FROM system.tables WHERE database IN (%(a)s, %(b)s)",
                {"a": store.database, "b": shard_database(store.database)},
            )
        finally:
            node.close()
        out[str(replica)] = {(str(d), str(n), str(e)) for d, n, e in rows}
    return out
