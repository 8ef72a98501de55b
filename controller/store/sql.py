"""dyncc's SQL layer: the .sql files, their version markers and their %(name)s parameters.

Files.  Migrations (sql/migrations/NNN_name.sql) and named queries (sql/queries/NAME.sql,
sql/views/NAME.sql) are found in this order: the directory DYNCC_SQL_DIR names (an
override); the package data of an installed dyncc (the wheel ships them as
controller.store.sqldata, read with importlib.resources); the repository's top-level `sql/`
directory (a development checkout or editable install).

Version markers.  One set of .sql files serves ClickHouse 18.16 and chDB 26.x.  Features
newer than 18.16 are written as markers that expand to nothing on old servers
(render_markers):

    {{lowcard(String)}}          LowCardinality(String)  (>= 19.1), else String
    {{codec(Delta, ZSTD(1))}}    CODEC(Delta, ZSTD(1))   (>= 19.10), else ''
    {{ttl(time + INTERVAL 1 DAY)}} TTL time + INTERVAL 1 DAY (>= 19.6), else ''
    {{ipv6(FixedString(16))}}    IPv6 (>= 19.3), else the argument
    {{sharded(KEY)}}             nothing; on a cluster the table is sharded by KEY
                                 (controller/store/cluster_schema.py)

Retention TTLs delete rows older than the interval at insert and merge time;
a store URL with ttl=off creates tables without them.

Slots.  A query file can hold `{{name}}` slots (no parentheses: a marker has them) that
splice() fills with other SQL text: another of dyncc's query files (comment lines dropped,
strip_comments) or a literal list of values (values_list, bounded by the caller).  The
slots must equal the parts given, so a typo fails here and not on the server.  One slot
is never spliced: `{{data}}`, where Store.query_rows_with puts the table of data sent
along with the query.  `{{...}}` is dyncc's only template syntax; %(name)s below is
parameter binding, not a template.

Views.  sql/views/NAME.sql is the SELECT of the plain view NAME that `dyncc schema apply`
creates (views(); controller/store/migrate.py apply_views), the one place its SQL lives.  A
view has no time filter and exposes a `time` column; whoever selects from it filters on it,
Grafana with its `$__timeFilter(time)` macro, which render_time_filter expands the way
Grafana's ClickHouse data source does (select_view: that query of one view).

Parameters.  ClickHouse 18.16 has no server-side query parameters and chDB takes plain
text, so both store back ends substitute %(name)s here (render): values are quoted as
ClickHouse literals (quote); anything else is rejected.

Everything but the file look-up is pure.
"""

from __future__ import annotations

import datetime as dt
import importlib.resources
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

#: the package the wheel ships sql/ as (pyproject: [tool.setuptools.package-dir])
SQL_PACKAGE = "controller.store.sqldata"
#: sql/ of a development checkout (controller/store/sql.py -> the repository root)
REPO_SQL_DIR = Path(__file__).resolve().parents[2] / "sql"

_MIGRATION_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


def _packaged_sql_dir() -> Path | None:
    """sql/ as installed package data, or None (not installed from a wheel)."""
    try:
        root = importlib.resources.files(SQL_PACKAGE)
    except ModuleNotFoundError:
        return None
    migrations = root.joinpath("migrations")
    if isinstance(migrations, Path) and migrations.is_dir():
        return migrations.parent
    return None


def sql_dir() -> Path:
    """The directory holding migrations/, queries/ and views/ (see the module docstring)."""
    override = os.environ.get("DYNCC_SQL_DIR")
    path = Path(override) if override else (_packaged_sql_dir() or REPO_SQL_DIR)
    if not (path / "migrations").is_dir():
        raise FileNotFoundError(f"dyncc SQL directory not found at {path} (set DYNCC_SQL_DIR)")
    return path


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    text: str


def migrations() -> list[Migration]:
    """All migration files in version order; duplicate versions are an error."""
    found: dict[int, Migration] = {}
    for path in sorted((sql_dir() / "migrations").glob("*.sql")):
        match = _MIGRATION_NAME.match(path.name)
        if not match:
            raise ValueError(f"migration file name {path.name!r} is not NNN_name.sql")
        version = int(match.group(1))
        if version in found:
            raise ValueError(f"two migrations with version {version}: {found[version].name}, {path.name}")
        found[version] = Migration(version, match.group(2), path.read_text())
    return [found[v] for v in sorted(found)]


@dataclass(frozen=True)
class View:
    name: str
    text: str  # the SELECT, with its comment lines

    @property
    def select(self) -> str:
        """The SELECT without its comment lines (what CREATE VIEW ... AS takes)."""
        return strip_comments(self.text)


_VIEW_NAME = re.compile(r"^([a-z][a-z0-9_]*)\.sql$")


def views() -> list[View]:
    """Every sql/views/NAME.sql in name order: the view NAME and its one SELECT statement."""
    found = []
    for path in sorted((sql_dir() / "views").glob("*.sql")):
        match = _VIEW_NAME.match(path.name)
        if not match:
            raise ValueError(f"view file name {path.name!r} is not name.sql (lower case, digits, _)")
        view = View(match.group(1), path.read_text())
        statements = split_statements(view.text)
        if len(statements) != 1 or not statements[0].upper().startswith("SELECT"):
            raise ValueError(f"view file {path.name} must hold one SELECT statement")
        found.append(view)
    return found


#: ClickHouse 18.16 pushes a filter on a view's columns into the view's SELECT (so the time
#: filter reaches the tables' keys) only with this setting; chDB does by default
VIEW_SETTINGS = "SETTINGS enable_optimize_predicate_expression = 1"


def select_view(name: str) -> str:
    """Every row of the view `name` in Grafana's time range (`$__timeFilter(time)`, expanded by
    render_time_filter), ordered by time: how a client reads the views."""
    if name not in {view.name for view in views()}:
        raise ValueError(f"not a dyncc view: {name!r}")
    return f"SELECT * FROM {name} WHERE $__timeFilter(time) ORDER BY time {VIEW_SETTINGS}"


@cache
def query(name: str) -> str:
    """The text of sql/queries/<name>.sql (or sql/<name>.sql when name has a folder)."""
    base = sql_dir()
    path = base / f"{name}.sql" if "/" in name else base / "queries" / f"{name}.sql"
    return path.read_text()


# ---- version markers

Version = tuple[int, ...]

_MARKER = re.compile(r"\{\{\s*(\w+)\((.*?)\)\s*\}\}", re.DOTALL)

LOWCARD_SINCE: Version = (19, 1)
CODEC_SINCE: Version = (19, 10)
TTL_SINCE: Version = (19, 6)
IPV6_SINCE: Version = (19, 3)


def parse_version(text: str) -> Version:
    """'18.16.1' or '26.9.2.1' -> (18, 16, 1) / (26, 9, 2, 1)."""
    parts = []
    for piece in text.strip().split("."):
        digits = re.match(r"\d+", piece)
        if not digits:
            break
        parts.append(int(digits.group(0)))
    if not parts:
        raise ValueError(f"not a ClickHouse version: {text!r}")
    return tuple(parts)


def _expanders(version: Version, ttl: bool) -> dict[str, Callable[[str], str]]:
    return {
        "lowcard": lambda arg: f"LowCardinality({arg})" if version >= LOWCARD_SINCE else arg,
        "codec": lambda arg: f"CODEC({arg})" if version >= CODEC_SINCE else "",
        "ttl": lambda arg: f"TTL {arg}" if ttl and version >= TTL_SINCE else "",
        "ipv6": lambda arg: "IPv6" if version >= IPV6_SINCE else arg,
        # the cluster form of a sharded table is planned by cluster_schema.py; one server: nothing
        "sharded": lambda arg: "",
    }


def render_markers(sql: str, version: Version, ttl: bool = True) -> str:
    """Expand every {{marker(arg)}} for a server of `version`.

    ttl=False leaves retention TTLs out (store URL option ttl=off), for stores
    that hold historic data on purpose: replays and tests with fixed dates.
    """
    expanders = _expanders(version, ttl)

    def replace(match: re.Match[str]) -> str:
        name, arg = match.group(1), match.group(2).strip()
        if name not in expanders:
            raise ValueError(f"unknown SQL template marker {{{{{name}(...)}}}}")
        return expanders[name](arg)

    return _MARKER.sub(replace, sql)


def split_statements(sql: str) -> list[str]:
    """Split a .sql file into statements on ';' at end of line; drop comments-only chunks."""
    statements = []
    for chunk in re.split(r";\s*(?:\n|$)", sql):
        lines = [ln for ln in chunk.splitlines() if not ln.strip().startswith("--")]
        body = "\n".join(lines).strip()
        if body:
            statements.append(body)
    return statements


# ---- %(name)s parameters

_PARAM = re.compile(r"%\((\w+)\)s")
_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\0": "\\0"}


def quote(value: Any) -> str:
    """Render one Python value as a ClickHouse literal."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot quote non-finite float {value!r}")
        return repr(value)
    if isinstance(value, str):
        return "'" + "".join(_ESCAPES.get(ch, ch) for ch in value) + "'"
    if isinstance(value, bytes):
        return "unhex('" + value.hex() + "')"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return f"toDateTime('{value:%Y-%m-%d %H:%M:%S}', 'UTC')"
    if isinstance(value, dt.date):
        return f"toDate('{value:%Y-%m-%d}')"
    if isinstance(value, Sequence):
        return "[" + ", ".join(quote(v) for v in value) + "]"
    if hasattr(value, "item"):  # numpy scalar
        return quote(value.item())
    raise TypeError(f"cannot quote {type(value).__name__} as a ClickHouse literal")


def render(sql: str, params: Mapping[str, Any] | None) -> str:
    """Replace every %(name)s with the quoted value; a missing name is an error."""
    if not params:
        if _PARAM.search(sql):
            raise KeyError(f"query needs parameters {sorted(set(_PARAM.findall(sql)))}")
        return sql

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in params:
            raise KeyError(f"query parameter {name!r} not given")
        return quote(params[name])

    return _PARAM.sub(replace, sql)


# ---- {{slot}} splicing

_SLOT = re.compile(r"\{\{\s*(\w+)\s*\}\}")
#: slots splice() leaves alone: {{data}} is filled by Store.query_rows_with
UNSPLICED = frozenset({"data"})
_TIME_FILTER = re.compile(r"\$__timeFilter\(\s*(\w+)\s*\)")


def strip_comments(sql: str) -> str:
    """The SQL without its whole-line `--` comments (so it can be nested in another)."""
    return "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--")).strip()


def slots(sql: str) -> set[str]:
    """The {{slot}} names of `sql` outside comment lines, except UNSPLICED ones."""
    return set(_SLOT.findall(strip_comments(sql))) - UNSPLICED


def splice(sql: str, parts: Mapping[str, str]) -> str:
    """`sql` with each {{slot}} replaced by parts[slot]; comment lines of both dropped.  Pure.

    Every slot must be given and every part used.  The parts are inserted as they are (no
    slot expansion inside them), so callers pass only dyncc's own query files or
    values_list() output, never anything a user typed.
    """
    code = strip_comments(sql)
    found = slots(code)
    if found != set(parts):
        raise ValueError(f"query slots {sorted(found)} do not match the parts given {sorted(parts)}")

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        return match.group(0) if name in UNSPLICED else strip_comments(parts[name]) + "\n"

    return _SLOT.sub(replace, code)


def values_list(rows: Sequence[Sequence[Any]]) -> str:
    """`(a, b), (c, d)`: tuples of quoted literals for an IN list (the caller bounds the rows)."""
    if not rows:
        raise ValueError("an empty values list")
    return ", ".join("(" + ", ".join(quote(v) for v in row) + ")" for row in rows)


def render_time_filter(sql: str, start_s: int, end_s: int) -> str:
    """Expand Grafana's `$__timeFilter(col)` to `col >= toDateTime(S) AND col <= toDateTime(E)`."""
    return _TIME_FILTER.sub(
        lambda m: f"{m.group(1)} >= toDateTime({int(start_s)}) AND {m.group(1)} <= toDateTime({int(end_s)})", sql
    )
