"""`dyncc schema apply`: create the database and apply pending migrations."""

from __future__ import annotations

import argparse

from controller.store import open_store
from controller.store.migrate import apply_migrations


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["apply", "status"], help="apply pending migrations / list them")
    parser.add_argument(
        "--clickhouse",
        required=True,
        metavar="URL",
        help="store URL: clickhouse://user:pass@host:port/db or chdb:///path/dir",
    )


def run(args: argparse.Namespace) -> int:
    store = open_store(args.clickhouse)
    try:
        if args.action == "status":
            rows = store.query_rows("SELECT version, name, applied_at FROM schema_migrations ORDER BY version")
            for version, name, applied_at in rows:
                print(f"{int(version):03d}_{name}  applied {applied_at}")
            return 0
        result = apply_migrations(store)
        print(
            f"schema on {store.url.redacted()} (server {result.server_version}): "
            f"applied {len(result.applied)} {result.applied}, already there {len(result.skipped)}"
        )
        return 0
    finally:
        store.close()
