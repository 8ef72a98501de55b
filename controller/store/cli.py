"""`dyncc schema apply|status`: create the database, apply pending migrations and create or
replace the views (sql/views), or list the migrations.

The flags come from SchemaSettings (controller/store/settings.py); dyncc/cli.py builds
the settings and calls run(settings).
"""

from __future__ import annotations

from controller.store import open_store
from controller.store.migrate import apply_migrations
from controller.store.settings import SchemaSettings

__all__ = ["SETTINGS", "run"]

SETTINGS = SchemaSettings


def run(settings: SchemaSettings) -> int:
    store = open_store(settings.store_url)
    try:
        if settings.action == "status":
            rows = store.query_rows("SELECT version, name, applied_at FROM schema_migrations ORDER BY version")
            for version, name, applied_at in rows:
                print(f"{int(version):03d}_{name}  applied {applied_at}")
            return 0
        result = apply_migrations(store, converge=True)
        nodes = f", {result.nodes} nodes" if result.nodes > 1 else ""
        print(
            f"schema on {store.url.redacted()} (server {result.server_version}{nodes}): "
            f"applied {len(result.applied)} {result.applied}, already there {len(result.skipped)}; "
            f"views created or replaced {len(result.views)} {result.views}"
        )
        return 0
    finally:
        store.close()
