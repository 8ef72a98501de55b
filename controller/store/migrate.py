"""Apply sql/migrations/*.sql to a store, once each, recording them in schema_migrations.

Idempotent: versions already recorded are skipped, and every statement is
written with IF NOT EXISTS so a half-applied migration can be re-run.

On a cluster (a ClusterStore) every node must answer: each statement runs where
controller/store/cluster_schema.py says (every node, one replica per shard, or once on
the query node), and schema_migrations is replicated to every node, so a migration is
recorded once for the whole cluster.  `dyncc schema apply` (converge=True) also runs the
CREATE statements of migrations already recorded on every node (IF NOT EXISTS: a no-op where
the table is), so a node added to the cluster gets every table and its data by
replication.  A component starting up (ingest, rollout, the lab) applies only what is
pending, so it starts while a replica is down when nothing is.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from controller.store import sql as sql_template
from controller.store.base import Store
from controller.store.clickhouse import ClickHouseStore
from controller.store.cluster import ClusterStore
from controller.store.cluster_schema import ClusterStatement, plan_statement, sharded_tables
from controller.store.sql import Migration, Version, migrations
from controller.store.topology import Replica, shard_database
from dyncc_common.errors import StoreError

log = logging.getLogger("dyncc.schema")

MIGRATIONS_DDL = """
CREATE TABLE IF NOT EXISTS schema_migrations
(
    version UInt32,
    name String,
    applied_at DateTime
)
ENGINE = MergeTree()
ORDER BY version
"""


@dataclass
class ApplyResult:
    applied: list[int]
    skipped: list[int]
    server_version: str
    nodes: int = 1


def applied_versions(store: Store) -> set[int]:
    rows = store.query_rows("SELECT version FROM schema_migrations")
    return {int(r[0]) for r in rows}


def apply_migrations(store: Store, available: list[Migration] | None = None, converge: bool = False) -> ApplyResult:
    """Create the database if needed and apply every migration not yet recorded.

    A cluster: with nothing pending only the query node is asked (a component starting while a
    replica is down still starts); `converge` (what `dyncc schema apply` does) also runs the
    CREATE statements on every node, so a node added since gets its tables.
    """
    todo = available if available is not None else migrations()
    if isinstance(store, ClusterStore):
        if not converge and _nothing_pending(store, todo):
            return ApplyResult([], [m.version for m in todo], ".".join(map(str, store.version())))
        return _apply_on_cluster(store, todo)
    store.ensure_database()
    store.execute(MIGRATIONS_DDL)
    version = store.version()
    done = applied_versions(store)
    result = ApplyResult([], [], ".".join(map(str, version)))
    for migration in todo:
        if migration.version in done:
            result.skipped.append(migration.version)
            continue
        for statement in sql_template.split_statements(_rendered(store, migration.text, version)):
            store.execute(statement)
        _record(store, migration)
        result.applied.append(migration.version)
    return result


def _nothing_pending(store: ClusterStore, todo: list[Migration]) -> bool:
    try:
        done = applied_versions(store)
    except StoreError:  # no database or table yet (or no query node: the full apply says which)
        return False
    return {m.version for m in todo} <= done


def _rendered(store: Store, text: str, version: Version) -> str:
    return sql_template.render_markers(text, version, ttl=store.url.options.get("ttl", "on") != "off")


def _record(store: Store, migration: Migration) -> None:
    store.execute(
        # INSERT ... SELECT: inline VALUES over the native protocol hang on ClickHouse 18.16
        "INSERT INTO schema_migrations (version, name, applied_at) SELECT %(version)s, %(name)s, now()",
        {"version": migration.version, "name": migration.name},
    )
    log.info("applied migration %03d_%s", migration.version, migration.name)


def cluster_plan(store: ClusterStore, text: str, version: Version, sharded: frozenset[str]) -> list[ClusterStatement]:
    """The cluster statements of one migration text (markers expanded for `version`)."""
    steps: list[ClusterStatement] = []
    for statement in sql_template.split_statements(text):
        for step in plan_statement(statement, database=store.database, cluster=store.cluster, sharded=sharded):
            steps.append(ClusterStatement(step.where, step.database, _rendered(store, step.sql, version)))
    return steps


def _apply_on_cluster(store: ClusterStore, todo: list[Migration]) -> ApplyResult:
    topology = store.topology()
    nodes: dict[tuple[Replica, str], ClickHouseStore] = {}
    try:
        for replica in topology.nodes():  # every node first: refuse before changing anything
            for database in (store.database, shard_database(store.database)):
                node = store.node_store(replica, database)
                nodes[(replica, database)] = node
                try:
                    node.ensure_database()
                except StoreError as exc:
                    raise StoreError(f"cluster {store.cluster}: node {replica} refused the schema: {exc}") from exc
        version = store.version()
        sharded = sharded_tables(m.text for m in migrations())
        schema_table = cluster_plan(store, MIGRATIONS_DDL, version, sharded)
        _run_steps(store, nodes, schema_table)
        done = applied_versions(store)
        result = ApplyResult([], [], ".".join(map(str, version)), nodes=len(topology.nodes()))
        for migration in todo:
            steps = cluster_plan(store, migration.text, version, sharded)
            if migration.version in done:
                # a node added since (a new replica or shard) gets the tables: CREATE ... IF NOT EXISTS
                # on every node is a no-op where they exist; data reaches a new replica by replication
                _run_steps(store, nodes, [s for s in steps if s.where == "every_node" and _creates(s.sql)])
                result.skipped.append(migration.version)
                continue
            _run_steps(store, nodes, steps)
            _record(store, migration)
            result.applied.append(migration.version)
        return result
    finally:
        for node in nodes.values():
            node.close()


def _creates(sql: str) -> bool:
    return sql.lstrip().upper().startswith("CREATE ")


def _run_steps(
    store: ClusterStore, nodes: dict[tuple[Replica, str], ClickHouseStore], steps: list[ClusterStatement]
) -> None:
    topology = store.topology()
    for step in steps:
        if step.where == "once" and step.database == store.database:
            store.execute(step.sql)  # the query node (an insert into a Distributed table waits for the shards)
            continue
        every = step.where == "every_node"
        targets = topology.nodes() if every else [shard.replicas[0] for shard in topology.shards]
        for replica in targets:
            try:
                nodes[(replica, step.database)].execute(step.sql)
            except StoreError as exc:
                raise StoreError(f"cluster {store.cluster}: node {replica}: {exc}") from exc
