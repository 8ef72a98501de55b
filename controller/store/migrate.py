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

Views.  After the migrations, once every migration is applied, each sql/views/NAME.sql becomes
the plain view NAME (apply_views; on a cluster on every node, in the database of the
Distributed tables).  A view holds no data, so a changed definition is applied by replacing
it: the new SELECT is created as a scratch view, the server's own text of it compared with
the existing view's (both formatted by the same server, so only a real change differs), and
on a difference the view is dropped and created again.  An unchanged view is left alone.
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass, field

from controller.store.base import Store
from controller.store.clickhouse import ClickHouseStore
from controller.store.cluster import ClusterStore
from controller.store.cluster_schema import ClusterStatement, plan_statement, sharded_tables
from controller.store.sql import Migration, Version, View, migrations, render_markers, split_statements, views
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
    #: the views created or replaced (on any node); [] when none changed or the schema is partial
    views: list[str] = field(default_factory=list)


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
        for statement in split_statements(_rendered(store, migration.text, version)):
            store.execute(statement)
        _record(store, migration)
        result.applied.append(migration.version)
    if _complete(done, result.applied):
        result.views = apply_views(store)
    return result


def _complete(done: set[int], applied: list[int]) -> bool:
    """Whether every migration is applied (the views read the whole schema)."""
    return {m.version for m in migrations()} <= done | set(applied)


def _nothing_pending(store: ClusterStore, todo: list[Migration]) -> bool:
    try:
        done = applied_versions(store)
    except StoreError:  # no database or table yet (or no query node: the full apply says which)
        return False
    return {m.version for m in todo} <= done


def _rendered(store: Store, text: str, version: Version) -> str:
    return render_markers(text, version, ttl=store.url.ttl)


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
    for statement in split_statements(text):
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
        if _complete(done, result.applied):
            result.views = _views_on_cluster(store, nodes)
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


# ---- plain views (sql/views)

_VIEW_HEADER = re.compile(r"^\s*CREATE\s+VIEW\s+\S+", re.IGNORECASE)


def create_view_sql(name: str, view: View) -> str:
    """CREATE VIEW IF NOT EXISTS name AS <the view's SELECT>."""
    return f"CREATE VIEW IF NOT EXISTS {name} AS\n{view.select}"


def apply_views(store: Store, available: list[View] | None = None) -> list[str]:
    """Create every view of sql/views, or replace it when its definition changed (the module
    docstring); the names created or replaced.  The store's database must hold every table."""
    return [view.name for view in (available if available is not None else views()) if ensure_view(store, view)]


def ensure_view(store: Store, view: View) -> bool:
    """Create the view, or replace it when the server's text of it differs from the file's;
    False when it was there unchanged.  Refuses to replace anything but a view."""
    current = _definition(store, view.name)
    if current is None:
        store.execute(create_view_sql(view.name, view))
        log.info("created view %s", view.name)
        return True
    scratch = f"{view.name}__new_{uuid.uuid4().hex[:8]}"
    store.execute(create_view_sql(scratch, view))
    try:
        wanted = _definition(store, scratch)
    finally:
        store.execute(f"DROP TABLE IF EXISTS {scratch}")
    if wanted is not None and _body(wanted) == _body(current):
        return False
    store.execute(f"DROP TABLE IF EXISTS {view.name}")
    store.execute(create_view_sql(view.name, view))
    log.info("replaced view %s (its definition changed)", view.name)
    return True


def _definition(store: Store, name: str) -> str | None:
    """The server's CREATE text of the view `name` in the store's database, None if none."""
    rows = store.query_rows(
        "SELECT engine, create_table_query FROM system.tables WHERE database = currentDatabase() AND name = %(name)s",
        {"name": name},
    )
    if not rows:
        return None
    engine, text = str(rows[0][0]), rows[0][1]
    if engine != "View":
        raise StoreError(f"{name} is a {engine} table, not a view: dyncc will not replace it with its view {name}")
    return text.decode() if isinstance(text, bytes) else str(text)


def _body(create: str) -> str:
    """A view's CREATE text without `CREATE VIEW db.name` (a scratch view's name differs)."""
    return _VIEW_HEADER.sub("", create, count=1).strip()


def _views_on_cluster(store: ClusterStore, nodes: dict[tuple[Replica, str], ClickHouseStore]) -> list[str]:
    """apply_views on every node, in the database plan_statement puts a plain view in."""
    changed: list[str] = []
    for view in views():
        for step in plan_statement(
            create_view_sql(view.name, view), database=store.database, cluster=store.cluster, sharded=frozenset()
        ):
            for replica in store.topology().nodes():
                try:
                    created = ensure_view(nodes[(replica, step.database)], view)
                except StoreError as exc:
                    raise StoreError(f"cluster {store.cluster}: node {replica}: view {view.name}: {exc}") from exc
                if created and view.name not in changed:
                    changed.append(view.name)
    return changed
