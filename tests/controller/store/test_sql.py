"""Pure tests of version-dependent DDL expansion and SQL parameter quoting."""

from __future__ import annotations

import datetime as dt

import pytest

from controller.store import sql as sql_params
from controller.store import sql as sql_template


def test_markers_vanish_on_18_16() -> None:
    sql = "a {{lowcard(String)}}, b UInt8 {{codec(Delta, ZSTD(1))}}) {{ttl(t + INTERVAL 1 DAY)}}"
    assert sql_template.render_markers(sql, (18, 16, 1)) == "a String, b UInt8 ) "


def test_markers_expand_on_new_servers() -> None:
    sql = "a {{lowcard(String)}}, b UInt8 {{codec(Delta, ZSTD(1))}} {{ttl(t + INTERVAL 1 DAY)}}"
    assert sql_template.render_markers(sql, (26, 9, 2, 1)) == (
        "a LowCardinality(String), b UInt8 CODEC(Delta, ZSTD(1)) TTL t + INTERVAL 1 DAY"
    )


def test_unknown_marker_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown SQL template marker"):
        sql_template.render_markers("{{frobnicate(x)}}", (20, 1))


def test_split_statements_drops_comments() -> None:
    text = "-- header\nCREATE TABLE a (x UInt8) ENGINE = Memory;\n\n-- c\nSELECT 1;\n"
    assert sql_template.split_statements(text) == ["CREATE TABLE a (x UInt8) ENGINE = Memory", "SELECT 1"]


def test_parse_version() -> None:
    assert sql_template.parse_version("18.16.1") == (18, 16, 1)
    assert sql_template.parse_version("26.9.2.1") == (26, 9, 2, 1)
    with pytest.raises(ValueError):
        sql_template.parse_version("banana")


def test_quote_values() -> None:
    assert sql_params.quote("it's") == "'it\\'s'"
    assert sql_params.quote(["a", 1]) == "['a', 1]"
    assert sql_params.quote(dt.datetime(2026, 1, 2, 3, 4, 5)) == "toDateTime('2026-01-02 03:04:05', 'UTC')"
    assert sql_params.quote(b"\x01\xff") == "unhex('01ff')"
    with pytest.raises(TypeError):
        sql_params.quote(object())
    with pytest.raises(ValueError):
        sql_params.quote(float("nan"))


def test_render_requires_every_parameter() -> None:
    assert sql_params.render("SELECT %(a)s", {"a": 5}) == "SELECT 5"
    with pytest.raises(KeyError):
        sql_params.render("SELECT %(a)s, %(b)s", {"a": 5})
    with pytest.raises(KeyError):
        sql_params.render("SELECT %(a)s", None)
