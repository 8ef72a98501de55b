"""How one migration statement runs on a cluster: where, in which database, as what SQL.  Pure.

The same .sql files serve one server and a cluster.  Their cluster part is one marker:
a CREATE TABLE carrying `{{sharded(KEY)}}` holds rows sharded by KEY; on one server the
marker expands to nothing.  On a cluster (plan_statement):

  CREATE TABLE t ... {{sharded(KEY)}}   t in the shard database (topology.shard_database)
                                        on every node, engine Replicated<engine> with the
                                        path /clickhouse/tables/{shard}/<db>/t; and on
                                        every node `<db>.t` = Distributed(cluster, shard
                                        database, t, KEY), the name the code queries
  CREATE TABLE t ...                    t in <db> on every node, replicated to all of
                                        them (path /clickhouse/tables/all/<db>/t)
  CREATE MATERIALIZED VIEW v TO t       on every node, in the shard database when t is
                                        sharded (its source must be too), else in <db>
  CREATE VIEW v AS SELECT ...           on every node, in <db>: it reads the Distributed
                                        tables there (sql/views, migrate.py apply_views)
  ALTER TABLE t ADD|DROP|MODIFY COLUMN  once per shard (sharded t; replication carries it
                                        to the other replica) plus every node's
                                        Distributed t; once when t is replicated to all
  ALTER TABLE t UPDATE|DELETE, TRUNCATE once per shard (sharded) or once (replicated to
                                        all): replicated tables pass these on
  INSERT INTO t ... SELECT              once, on the query node (into the Distributed
                                        table when t is sharded)
  DROP TABLE / DROP VIEW                every node, both databases

`{shard}` and `{replica}` are the servers' own macros.  Engines must take no arguments
(every dyncc table's engine is `<Kind>MergeTree()`); anything else is refused here, before
a statement reaches a server.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from controller.store.topology import shard_database

__all__ = [
    "ClusterStatement",
    "Where",
    "plan_statement",
    "sharded_tables",
    "strip_sharded",
]

#: every node / one node per shard / the query node only
Where = Literal["every_node", "each_shard", "once"]

SHARDED_MARKER = re.compile(r"\{\{\s*sharded\((.*?)\)\s*\}\}", re.DOTALL)
_CREATE_TABLE = re.compile(r"^\s*CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS\s+(\w+)\b", re.IGNORECASE)
_CREATE_VIEW = re.compile(
    r"^\s*CREATE\s+MATERIALIZED\s+VIEW\s+IF\s+NOT\s+EXISTS\s+(\w+)\s+TO\s+(\w+)\s+AS\s+(.*)$",
    re.IGNORECASE | re.DOTALL,
)
_CREATE_PLAIN_VIEW = re.compile(r"^\s*CREATE\s+VIEW\s+IF\s+NOT\s+EXISTS\s+(\w+)\s+AS\s+SELECT\b", re.IGNORECASE)
_ALTER = re.compile(r"^\s*ALTER\s+TABLE\s+(\w+)\s+(\w+)", re.IGNORECASE)
_TRUNCATE = re.compile(r"^\s*TRUNCATE\s+TABLE\s+(?:IF\s+EXISTS\s+)?(\w+)\s*$", re.IGNORECASE)
_INSERT = re.compile(r"^\s*INSERT\s+INTO\s+(\w+)\b", re.IGNORECASE)
_DROP = re.compile(r"^\s*DROP\s+(TABLE|VIEW)\s+(?:IF\s+EXISTS\s+)?(\w+)\s*$", re.IGNORECASE)
_ENGINE = re.compile(r"\bENGINE\s*=\s*(\w*MergeTree)\s*\(\s*(.*?)\s*\)", re.IGNORECASE | re.DOTALL)
_FROM = re.compile(r"\bFROM\s+(\w+)\b", re.IGNORECASE)
_COLUMN_ALTERS = {"ADD", "DROP", "MODIFY", "COMMENT", "RENAME"}


@dataclass(frozen=True)
class ClusterStatement:
    """One statement to run: where, with which default database, the SQL."""

    where: Where
    database: str
    sql: str


def sharded_tables(texts: Iterable[str]) -> frozenset[str]:
    """The tables created with a {{sharded(...)}} marker in any of the migration texts."""
    names = set()
    for text in texts:
        for statement in re.split(r";\s*(?:\n|$)", _without_comments(text)):
            if SHARDED_MARKER.search(statement):
                match = _CREATE_TABLE.match(statement)
                if not match:
                    raise ValueError("{{sharded(...)}} is only allowed in CREATE TABLE IF NOT EXISTS")
                names.add(match.group(1))
    return frozenset(names)


def strip_sharded(sql: str) -> str:
    """The statement without its {{sharded(...)}} marker (what one server runs)."""
    return SHARDED_MARKER.sub("", sql)


def plan_statement(statement: str, *, database: str, cluster: str, sharded: frozenset[str]) -> list[ClusterStatement]:
    """The cluster form of one migration statement (markers other than sharded already expanded)."""
    code = _without_comments(statement)
    shard_db = shard_database(database)
    key_match = SHARDED_MARKER.search(code)
    code = strip_sharded(code).strip()
    if match := _CREATE_TABLE.match(code):
        table = match.group(1)
        if key_match:
            local = _replicated(code, f"/clickhouse/tables/{{shard}}/{database}/{table}")
            dist = (
                f"CREATE TABLE IF NOT EXISTS {database}.{table} AS {shard_db}.{table} "
                f"ENGINE = Distributed({cluster}, {shard_db}, {table}, {key_match.group(1).strip()})"
            )
            return [ClusterStatement("every_node", shard_db, local), ClusterStatement("every_node", database, dist)]
        if table in sharded:
            raise ValueError(f"table {table} is sharded elsewhere but created here without {{{{sharded(...)}}}}")
        path = f"/clickhouse/tables/all/{database}/{table}"
        return [ClusterStatement("every_node", database, _replicated(code, path))]
    if match := _CREATE_VIEW.match(code):
        view, target, select = match.groups()
        sources = set(_FROM.findall(select))
        if target in sharded:
            plain = sorted(s for s in sources if s not in sharded)
            if plain:
                raise ValueError(f"view {view} writes sharded {target} but reads {', '.join(plain)}, not sharded")
            return [ClusterStatement("every_node", shard_db, code)]
        if sources & sharded:
            raise ValueError(f"view {view} reads a sharded table but writes {target}, not sharded")
        return [ClusterStatement("every_node", database, code)]
    if _CREATE_PLAIN_VIEW.match(code):
        return [ClusterStatement("every_node", database, code)]
    if match := _ALTER.match(code):
        table, verb = match.group(1), match.group(2).upper()
        if table not in sharded:
            return [ClusterStatement("once", database, code)]
        steps = [ClusterStatement("each_shard", shard_db, code)]
        if verb in _COLUMN_ALTERS:
            steps.append(ClusterStatement("every_node", database, code))
        return steps
    if match := _TRUNCATE.match(code):
        table = match.group(1)
        where: Where = "each_shard" if table in sharded else "once"
        return [ClusterStatement(where, _db(table, database, sharded), code)]
    if _INSERT.match(code):
        return [ClusterStatement("once", database, code)]
    if match := _DROP.match(code):
        return [ClusterStatement("every_node", shard_db, code), ClusterStatement("every_node", database, code)]
    raise ValueError(f"statement not supported on a cluster: {code.splitlines()[0][:80]!r}")


def _db(table: str, database: str, sharded: frozenset[str]) -> str:
    return shard_database(database) if table in sharded else database


def _replicated(code: str, path: str) -> str:
    match = _ENGINE.search(code)
    if not match:
        raise ValueError(f"no <Kind>MergeTree() engine in {code.splitlines()[0][:80]!r}")
    if match.group(2):
        raise ValueError(f"engine {match.group(1)} with arguments cannot be made replicated here")
    engine = f"ENGINE = Replicated{match.group(1)}('{path}', '{{replica}}')"
    return code[: match.start()] + engine + code[match.end() :]


def _without_comments(sql: str) -> str:
    return "\n".join(line for line in sql.splitlines() if not line.strip().startswith("--"))
