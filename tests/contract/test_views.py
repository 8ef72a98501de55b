"""The views `dyncc schema apply` creates from sql/views, on ClickHouse 18.16 and chDB: created
once the schema is complete, selected with a time filter of the caller's own (or Grafana's
macro), replaced when their definition changes and left alone when it does not."""

from __future__ import annotations

import datetime as dt

import pytest

from controller.store import Store, StoreError, open_store
from controller.store.migrate import apply_migrations, apply_views, ensure_view
from controller.store.sql import View, migrations, render_time_filter, select_view, views
from dyncc.cli import main as cli_main
from tests.support import view_data
from tests.support.view_data import view_query


def view_engines(store: Store) -> dict[str, str]:
    rows = store.query_rows("SELECT name, engine FROM system.tables WHERE database = currentDatabase()")
    return {str(name): str(engine) for name, engine in rows}


def test_the_view_files_are_the_views() -> None:
    assert tuple(v.name for v in views()) == view_data.VIEWS
    for view in views():
        assert "$__timeFilter" not in view.select and "ORDER BY" not in view.select.upper()


def test_select_view_is_grafanas_query_of_a_known_view() -> None:
    assert select_view("treated_vs_holdout").startswith("SELECT * FROM treated_vs_holdout WHERE $__timeFilter(time)")
    for bad in ("tcpinfo", "treated_vs_holdout; DROP TABLE tcpinfo", "../queries/report_goodput"):
        with pytest.raises(ValueError, match="not a dyncc view"):
            select_view(bad)


def test_schema_apply_creates_every_view_and_leaves_them_alone_after(store: Store) -> None:
    engines = view_engines(store)
    assert all(engines.get(name) == "View" for name in view_data.VIEWS), engines
    again = apply_migrations(store)
    assert again.applied == [] and again.views == []
    assert not [name for name in view_engines(store) if "__new_" in name]  # no scratch view left


def test_views_return_the_aggregates_of_the_callers_time_window(store: Store) -> None:
    view_data.insert(store)
    view_data.check_all(store)
    want = view_data.expected()
    start, end = (view_data.unix_seconds(t) for t in (view_data.START, view_data.END))
    for name in view_data.VIEWS:
        # Grafana's form: its macro on the view's time column (inclusive end)
        grafana = render_time_filter(
            f"SELECT toUInt32(time), {', '.join(view_data.COLUMNS[name])} FROM {name} WHERE $__timeFilter(time)",
            start,
            end - 1,
        )
        view_data.assert_rows(name, view_data.rows(store, name, grafana), want[name])
        # what dyncc's own code runs (controller/report/data.py view_query; inclusive end too)
        df = store.query_df(view_query(name, view_data.START, view_data.END - dt.timedelta(seconds=1)))
        assert len(df) == len(want[name]) and list(df.columns)[: 1 + len(view_data.COLUMNS[name])] == [
            "time",
            *view_data.COLUMNS[name],
        ]


def test_a_changed_view_is_replaced_on_apply(store: Store) -> None:
    view_data.insert(store)
    old = View("bbr_share_of_sockets", "SELECT toStartOfFiveMinute(time) AS time, pop FROM tcpinfo GROUP BY time, pop")
    assert apply_views(store, [old]) == ["bbr_share_of_sockets"]  # a definition of an older version
    assert "bbr_share" not in [str(r[0]) for r in store.query_rows("DESCRIBE TABLE bbr_share_of_sockets")]
    assert apply_views(store, [old]) == []
    result = apply_migrations(store)  # the upgrade: `dyncc schema apply` with the new files
    assert result.applied == [] and result.views == ["bbr_share_of_sockets"]
    want = view_data.expected()["bbr_share_of_sockets"]
    view_data.assert_rows("bbr_share_of_sockets", view_data.rows(store, "bbr_share_of_sockets"), want)
    assert apply_migrations(store).views == []


def test_a_table_of_a_views_name_is_never_replaced(store: Store) -> None:
    store.execute("CREATE TABLE not_a_view (time DateTime) ENGINE = MergeTree() ORDER BY time")
    with pytest.raises(StoreError, match="not a view"):
        ensure_view(store, View("not_a_view", "SELECT now() AS time"))
    assert view_engines(store)["not_a_view"] == "MergeTree"


def test_views_wait_for_the_whole_schema(store_url: str) -> None:
    """A store brought to an older schema version (tests of upgrades do) gets no views yet."""
    store = open_store(store_url)
    try:
        partial = apply_migrations(store, [m for m in migrations() if m.version < 7])
        assert partial.views == [] and "selections_with_outcome" not in view_engines(store)
        full = apply_migrations(store)
        assert full.views == list(view_data.VIEWS)
    finally:
        store.close()


def test_schema_apply_cli_says_which_views_it_made(clickhouse_db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["schema", "apply", "--clickhouse", clickhouse_db_url]) == 0
    first = capsys.readouterr().out
    assert f"views created or replaced {len(view_data.VIEWS)} " in first, first
    assert cli_main(["schema", "apply", "--clickhouse", clickhouse_db_url]) == 0
    second = capsys.readouterr().out
    assert "applied 0 []" in second and "views created or replaced 0 []" in second, second
