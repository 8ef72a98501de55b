"""`dyncc schema apply` on ClickHouse 18.16 and chDB, the rollup view, and CLI errors."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from controller.store import Store, open_store
from controller.store.migrate import apply_migrations
from controller.store.sql import LOWCARD_SINCE, migrations, query
from dyncc.cli import main as cli_main

EXPECTED_TABLES = {
    "tcpinfo",
    "tcpinfo_5m",
    "tcpinfo_5m_mv",
    "ingest_dead_letter",
    "selections",
    "config_versions",
    "apply_status",
    "schema_migrations",
}


def test_schema_apply_twice_is_idempotent(store_url: str, tmp_path: Path) -> None:
    if store_url.startswith("chdb"):
        # A child process cannot open the directory this process's chDB session holds.
        store_url = f"chdb://{tmp_path / 'chdb-cli'}?database=cli"
    first = subprocess.run(
        [sys.executable, "-m", "dyncc.cli", "schema", "apply", "--clickhouse", store_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert first.returncode == 0, first.stderr
    second = subprocess.run(
        [sys.executable, "-m", "dyncc.cli", "schema", "apply", "--clickhouse", store_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert second.returncode == 0, second.stderr
    assert "applied 0 []" in second.stdout
    if store_url.startswith("chdb"):
        return  # the chDB directory is held by this process's session; checked below in-process
    store = open_store(store_url)
    try:
        tables = {r[0] for r in store.query_rows("SELECT name FROM system.tables WHERE database = currentDatabase()")}
        assert tables >= EXPECTED_TABLES
        versions = [r[0] for r in store.query_rows("SELECT version FROM schema_migrations ORDER BY version")]
        assert versions == [m.version for m in migrations()]
    finally:
        store.close()


def test_schema_apply_in_process_both_backends(store: Store) -> None:
    tables = {r[0] for r in store.query_rows("SELECT name FROM system.tables WHERE database = currentDatabase()")}
    assert tables >= EXPECTED_TABLES
    again = apply_migrations(store)
    assert again.applied == [] and again.skipped == [m.version for m in migrations()]
    create = store.query_rows(
        "SELECT create_table_query FROM system.tables WHERE database = currentDatabase() AND name = 'tcpinfo'"
    )[0][0]
    if store.version() >= LOWCARD_SINCE:
        assert "LowCardinality(String)" in create and "CODEC(" in create
    else:
        assert "LowCardinality" not in create and "CODEC" not in create


def _insert_known(store: Store, bucket_start: dt.datetime) -> tuple[np.ndarray, np.ndarray]:
    """40 rows in one 5-minute bucket for one prefix: 20 big flows, 20 small ones."""
    n = 40
    rates = np.arange(1, n + 1, dtype=np.uint64) * 1000
    acked = np.where(np.arange(n) % 2 == 0, 200_000, 50_000).astype(np.uint64)
    ts = int(bucket_start.replace(tzinfo=dt.UTC).timestamp()) + np.arange(n, dtype=np.uint32) % 290
    store.insert_columns(
        "tcpinfo",
        {
            "time": ts.astype(np.uint32),
            "pop": ["lax"] * n,
            "prefix": ["198.51.100.0/24"] * n,
            "family": np.full(n, 2, dtype=np.uint8),
            "delivery_rate": rates,
            "bytes_acked": acked,
            "bytes_sent": acked,
            "bytes_retrans": np.zeros(n, dtype=np.uint64),
            "min_rtt": (np.arange(n, dtype=np.uint32) + 1) * 100,
        },
    )
    return rates, acked


def test_rollup_view_quantiles_and_counts(store: Store) -> None:
    start = dt.datetime(2026, 1, 1, 12, 0, 0)
    rates, acked = _insert_known(store, start)
    # A second insert block into the same bucket: the rollup must merge states.
    rates2, acked2 = _insert_known(store, start)
    all_rates = np.concatenate([rates, rates2]).astype(float)
    all_acked = np.concatenate([acked, acked2])
    qual = all_rates[all_acked > 102400]
    df = store.query_df(
        query("store_rollup_read"),
        {
            "pop": "lax",
            "start": start,
            "end": start + dt.timedelta(minutes=5),
        },
    )
    assert len(df) == 1
    row = df.iloc[0]
    assert int(row["samples"]) == 80
    assert int(row["qualifying"]) == int((all_acked > 102400).sum()) == 40
    assert int(row["bytes_acked"]) == int(all_acked.sum())
    expected_all = np.quantile(all_rates, [0.05, 0.1, 0.5])
    expected_qual = np.quantile(qual, [0.05, 0.1, 0.5])
    assert np.allclose(list(row["delivery_rate_q"]), expected_all, rtol=1e-6)
    assert np.allclose(list(row["delivery_rate_qual_q"]), expected_qual, rtol=1e-6)


@pytest.mark.parametrize(
    "url, fragment",
    [
        ("postgres://x@127.0.0.1/db", "unsupported store URL scheme"),
        ("clickhouse://default:@127.0.0.1:1/db", "unreachable"),
    ],
)
def test_bad_url_one_line_exit_2(url: str, fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["schema", "apply", "--clickhouse", url])
    err = capsys.readouterr().err
    assert code == 2
    assert fragment in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bad_url_subprocess_has_no_traceback() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dyncc.cli",
            "schema",
            "apply",
            "--clickhouse",
            "clickhouse://default:@127.0.0.1:1/db",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr


def test_ttl_on_by_default_and_off_by_option(chdb_dir: object) -> None:
    """Retention TTL is created on chDB unless the URL says ttl=off (the fixtures' choice)."""
    for option, expect_ttl in (("", True), ("&ttl=off", False)):
        url = f"chdb://{chdb_dir}?database=ttl_{'off' if option else 'on'}{option}"
        opened = open_store(url)
        apply_migrations(opened)
        create = opened.query_rows(
            "SELECT create_table_query FROM system.tables WHERE database = currentDatabase() AND name = 'tcpinfo'"
        )[0][0]
        assert ("TTL" in create) is expect_ttl


ROUND_SETTINGS_COLUMNS = [
    ("round_id", "String"),
    ("round_time", "DateTime"),
    ("round_time_ns", "UInt64"),
    ("pop", "String"),
    ("bucket_seconds", "UInt32"),
    ("lookback_seconds", "UInt32"),
    ("expire_seconds", "UInt32"),
    ("scoring", "String"),
    ("evidence", "String"),
    ("dyncc_version", "String"),
]


def test_migration_011_creates_round_settings_on_an_upgraded_store(store_url: str) -> None:
    """011 is create-only (one CREATE TABLE IF NOT EXISTS, no ALTER: 18.16 has no ADD COLUMN IF NOT
    EXISTS): a store at 010 gets the table, a second apply changes nothing, both back ends."""
    from controller.store.sql import split_statements

    migration = next(m for m in migrations() if m.version == 11)
    assert migration.name == "round_settings"
    statements = split_statements(migration.text)
    assert len(statements) == 1 and statements[0].startswith("CREATE TABLE IF NOT EXISTS round_settings")
    store = open_store(store_url)
    try:
        apply_migrations(store, [m for m in migrations() if m.version < 11])
        assert not store.table_exists("round_settings")
        assert 11 in apply_migrations(store).applied
        assert store.table_exists("round_settings")
        assert apply_migrations(store).applied == []
        rows = store.query_rows(
            "SELECT name, type FROM system.columns WHERE database = currentDatabase() AND table = 'round_settings'"
        )
        lowcard = "LowCardinality(String)" if store.version() >= LOWCARD_SINCE else "String"
        expected = {n: lowcard if n == "pop" else t for n, t in ROUND_SETTINGS_COLUMNS}
        assert {str(n): str(t) for n, t in rows} == expected
    finally:
        store.close()


def test_migration_011_on_a_cluster_is_replicated_to_every_node() -> None:
    """The cluster form of 011 (pure; the cluster itself: tests/controller/cluster): like
    `selections`, one replicated table on every node, not sharded."""
    from controller.store.cluster_schema import plan_statement, sharded_tables
    from controller.store.sql import split_statements

    migration = next(m for m in migrations() if m.version == 11)
    sharded = sharded_tables(m.text for m in migrations())
    assert "round_settings" not in sharded
    (statement,) = split_statements(migration.text)
    steps = plan_statement(statement, database="d", cluster="c", sharded=sharded)
    assert [(s.where, s.database) for s in steps] == [("every_node", "d")]
    assert "ENGINE = ReplicatedMergeTree('/clickhouse/tables/all/d/round_settings', '{replica}')" in steps[0].sql
