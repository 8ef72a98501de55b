"""Apply sql/migrations/*.sql to a store, once each, recording them in schema_migrations.

Idempotent: versions already recorded are skipped, and every statement is
written with IF NOT EXISTS so a half-applied migration can be re-run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from controller.store import Store
from controller.store import sql as sql_template
from controller.store.sql import Migration, migrations

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


def applied_versions(store: Store) -> set[int]:
    rows = store.query_rows("SELECT version FROM schema_migrations")
    return {int(r[0]) for r in rows}


def apply_migrations(store: Store, available: list[Migration] | None = None) -> ApplyResult:
    """Create the database if needed and apply every migration not yet recorded."""
    store.ensure_database()
    store.execute(MIGRATIONS_DDL)
    version = store.version()
    done = applied_versions(store)
    result = ApplyResult([], [], ".".join(map(str, version)))
    for migration in available if available is not None else migrations():
        if migration.version in done:
            result.skipped.append(migration.version)
            continue
        rendered = sql_template.render_markers(migration.text, version, ttl=store.url.options.get("ttl", "on") != "off")
        for statement in sql_template.split_statements(rendered):
            store.execute(statement)
        store.execute(
            # INSERT ... SELECT: inline VALUES over the native protocol hang on ClickHouse 18.16
            "INSERT INTO schema_migrations (version, name, applied_at) SELECT %(version)s, %(name)s, now()",
            {"version": migration.version, "name": migration.name},
        )
        log.info("applied migration %03d_%s", migration.version, migration.name)
        result.applied.append(migration.version)
    return result
