"""Pure tests of version-dependent DDL expansion and SQL parameter quoting."""

from __future__ import annotations

import ast
import datetime as dt
import re
from pathlib import Path

import pytest

from controller.store.sql import (
    parse_version,
    quote,
    render,
    render_markers,
    render_time_filter,
    slots,
    splice,
    split_statements,
    strip_comments,
    values_list,
)


def test_markers_vanish_on_18_16() -> None:
    sql = "a {{lowcard(String)}}, b UInt8 {{codec(Delta, ZSTD(1))}}) {{ttl(t + INTERVAL 1 DAY)}}"
    assert render_markers(sql, (18, 16, 1)) == "a String, b UInt8 ) "


def test_markers_expand_on_new_servers() -> None:
    sql = "a {{lowcard(String)}}, b UInt8 {{codec(Delta, ZSTD(1))}} {{ttl(t + INTERVAL 1 DAY)}}"
    assert render_markers(sql, (26, 9, 2, 1)) == (
        "a LowCardinality(String), b UInt8 CODEC(Delta, ZSTD(1)) TTL t + INTERVAL 1 DAY"
    )


def test_unknown_marker_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown SQL template marker"):
        render_markers("{{frobnicate(x)}}", (20, 1))


def test_split_statements_drops_comments() -> None:
    text = "-- header\nCREATE TABLE a (x UInt8) ENGINE = Memory;\n\n-- c\nSELECT 1;\n"
    assert split_statements(text) == ["CREATE TABLE a (x UInt8) ENGINE = Memory", "SELECT 1"]


def test_parse_version() -> None:
    assert parse_version("18.16.1") == (18, 16, 1)
    assert parse_version("26.9.2.1") == (26, 9, 2, 1)
    with pytest.raises(ValueError):
        parse_version("banana")


def test_quote_values() -> None:
    assert quote("it's") == "'it\\'s'"
    assert quote(["a", 1]) == "['a', 1]"
    assert quote(dt.datetime(2026, 1, 2, 3, 4, 5)) == "toDateTime('2026-01-02 03:04:05', 'UTC')"
    assert quote(b"\x01\xff") == "unhex('01ff')"
    with pytest.raises(TypeError):
        quote(object())
    with pytest.raises(ValueError):
        quote(float("nan"))


def test_render_requires_every_parameter() -> None:
    assert render("SELECT %(a)s", {"a": 5}) == "SELECT 5"
    with pytest.raises(KeyError):
        render("SELECT %(a)s, %(b)s", {"a": 5})
    with pytest.raises(KeyError):
        render("SELECT %(a)s", None)


# ---- the one template module: {{slot}} splicing, values lists, Grafana's $__timeFilter

REPO = Path(__file__).resolve().parents[3]
# a keyword followed by more of a statement (a bare "SELECT" is a name, e.g. in an __all__)
SQL_START = re.compile(r"^\s*(SELECT|INSERT|ALTER|CREATE|EXISTS|DROP|TRUNCATE|OPTIMIZE)\s+\S")
PRODUCT_PACKAGES = ("controller", "collector", "schemas", "dyncc_common")


def test_splice_inserts_parts_without_comments_and_checks_slots() -> None:
    sql = "-- uses {{source}} here\nSELECT a FROM ({{source}}) AS s\nJOIN ({{ groups }}) USING (a)"
    out = splice(sql, {"source": "-- the source\nSELECT a FROM t -- why\n", "groups": "SELECT a FROM g"})
    assert out == "SELECT a FROM (SELECT a FROM t -- why\n) AS s\nJOIN (SELECT a FROM g\n) USING (a)"
    assert "uses" not in out and "the source" not in out
    with pytest.raises(ValueError, match="groups"):
        splice(sql, {"source": "SELECT 1"})  # a slot left empty
    with pytest.raises(ValueError, match="extra"):
        splice("SELECT 1", {"extra": "SELECT 2"})  # a part with no slot
    # a part is inserted as is: a slot inside it is not expanded again
    assert splice("SELECT * FROM ({{s}})", {"s": "SELECT '{{s}}'"}) == "SELECT * FROM (SELECT '{{s}}'\n)"


def test_splice_leaves_markers_data_and_parameters_alone() -> None:
    sql = "SELECT {{ipv6(FixedString(16))}}, %(pop)s FROM {{data}} WHERE x IN ({{keys}})"
    assert slots(sql) == {"keys"}
    out = splice(sql, {"keys": values_list([("a", 1), ("b", 2)])})
    assert out == "SELECT {{ipv6(FixedString(16))}}, %(pop)s FROM {{data}} WHERE x IN (('a', 1), ('b', 2)\n)"
    with pytest.raises(ValueError):
        values_list([])


def test_render_time_filter_is_grafanas_macro() -> None:
    sql = "SELECT 1 FROM t WHERE $__timeFilter( time ) AND $__timeFilter(ts)"
    assert render_time_filter(sql, 10, 20) == (
        "SELECT 1 FROM t WHERE time >= toDateTime(10) AND time <= toDateTime(20)"
        " AND ts >= toDateTime(10) AND ts <= toDateTime(20)"
    )


def test_query_files_use_only_the_one_slot_syntax() -> None:
    """No `{x}` or /*MARKER*/ splices left: every slot of a query file is {{x}}."""
    old_slot = re.compile(r"(?<!\{)\{\w+\}(?!\})")
    for path in sorted((REPO / "sql").rglob("*.sql")):
        code = strip_comments(path.read_text())
        assert not old_slot.search(code), path.name
        assert "/*" not in code, path.name
        assert "{{" not in code or path.parent.name in ("queries", "migrations"), path.name


def sql_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of string literals (and f-string heads) that start with an SQL keyword."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr):
            head = node.values[0] if node.values else None
            text = head.value if isinstance(head, ast.Constant) and isinstance(head.value, str) else ""
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if SQL_START.match(text):
            found.append((node.lineno, text.strip().splitlines()[0][:60]))
    return sorted(set(found))


def test_the_sql_finder_finds_sql() -> None:
    source = (
        'a = "SELECT 1"\nb = f"  INSERT INTO {t} VALUES"\nc = "select is a word"\nd = "EXISTS TABLE x"\n'
        '__all__ = ["SELECT"]\ne = """\n  SELECT x\n  FROM t"""\n'
    )
    assert [line for line, _ in sql_literals(source)] == [1, 2, 4, 6]


def test_no_sql_strings_outside_the_store() -> None:
    """SQL lives in sql/ files loaded by controller/store; only the store builds statements."""
    offenders = []
    for package in PRODUCT_PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith("controller/store/") or path.name.endswith("_pb2.py"):
                continue
            offenders += [f"{rel}:{line}: {text}" for line, text in sql_literals(path.read_text())]
    assert not offenders, "\n".join(offenders)
