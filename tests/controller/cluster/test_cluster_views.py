"""The views of sql/views on the real cluster (2 shards x 2 replicas): `dyncc schema apply
--cluster` creates them on every node, in the database of the Distributed tables, and any node
answers a query with a time filter with the aggregates over every shard's rows."""

from __future__ import annotations

import subprocess
import sys

from controller.store import ClusterStore, open_store
from controller.store.cluster_schema import plan_statement
from controller.store.migrate import apply_migrations, apply_views, create_view_sql
from controller.store.sql import View, migrations, views
from controller.store.topology import shard_database
from tests.support import view_data
from tests.support.cluster_util import node_tables, sync_replicas


def test_a_plain_view_is_planned_on_every_node_beside_the_distributed_tables() -> None:
    for view in views():
        steps = plan_statement(
            create_view_sql(view.name, view), database="d", cluster="c", sharded=frozenset({"tcpinfo", "tcpinfo_5m"})
        )
        assert [(s.where, s.database) for s in steps] == [("every_node", "d")], view.name
        assert steps[0].sql.startswith(f"CREATE VIEW IF NOT EXISTS {view.name} AS\nSELECT")


def test_views_on_every_node_read_every_shard(cluster_db_url: str) -> None:
    cluster = cluster_db_url.split("cluster=")[1].split("&")[0]
    cmd = [sys.executable, "-m", "dyncc.cli", "schema", "apply", "--clickhouse", cluster_db_url.split("?")[0]]
    first = subprocess.run([*cmd, "--cluster", cluster], capture_output=True, text=True, timeout=180)
    assert first.returncode == 0, first.stderr
    assert f"views created or replaced {len(view_data.VIEWS)}" in first.stdout, first.stdout
    second = subprocess.run([*cmd, "--cluster", cluster], capture_output=True, text=True, timeout=180)
    assert second.returncode == 0, second.stderr
    assert "applied 0" in second.stdout and "views created or replaced 0 []" in second.stdout, second.stdout

    store = open_store(cluster_db_url)
    assert isinstance(store, ClusterStore)
    try:
        db, shard_db = store.database, shard_database(store.database)
        for where, tables in node_tables(store).items():
            engines = {(d, n): e for d, n, e in tables}
            for name in view_data.VIEWS:
                assert engines.get((db, name)) == "View", (where, name)
                assert (shard_db, name) not in engines, (where, name)
            assert not [n for _, n, _ in tables if "__new_" in n], where  # no scratch view left

        view_data.insert(store)  # telemetry through the Distributed table: rows on both shards
        sync_replicas(cluster_db_url)
        shards = [int(s.query_rows("SELECT count() FROM tcpinfo")[0][0]) for s in store.shard_stores()]
        assert all(n > 0 for n in shards), shards
        view_data.check_all(store)  # the query node
        for replica in store.topology().nodes():  # and every other node (any can be Grafana's)
            node = store.node_store(replica, db)
            try:
                view_data.check_all(node)
            finally:
                node.close()

        # an older definition on every node is replaced by schema apply (converge), everywhere
        old = View("treated_vs_holdout", "SELECT bucket AS time, pop FROM tcpinfo_5m GROUP BY time, pop")
        for replica in store.topology().nodes():
            node = store.node_store(replica, db)
            try:
                assert apply_views(node, [old]) == ["treated_vs_holdout"]
            finally:
                node.close()
        result = apply_migrations(store, converge=True)
        assert result.applied == [] and result.views == ["treated_vs_holdout"]
        assert len(result.skipped) == len(migrations())
        for replica in store.topology().nodes():
            node = store.node_store(replica, db)
            try:
                want = view_data.expected()["treated_vs_holdout"]
                view_data.assert_rows("treated_vs_holdout", view_data.rows(node, "treated_vs_holdout"), want)
            finally:
                node.close()
    finally:
        store.close()
