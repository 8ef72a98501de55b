"""Locate and load dyncc's .sql files (migrations and named queries).

The files live in the repository's top-level `sql/` directory; DYNCC_SQL_DIR
overrides the location for installs that put them elsewhere.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

_MIGRATION_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


def sql_dir() -> Path:
    override = os.environ.get("DYNCC_SQL_DIR")
    path = Path(override) if override else Path(__file__).resolve().parent.parent / "sql"
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


@cache
def query(name: str) -> str:
    """The text of sql/queries/<name>.sql (or sql/<name>.sql when name has a folder)."""
    base = sql_dir()
    path = base / f"{name}.sql" if "/" in name else base / "queries" / f"{name}.sql"
    return path.read_text()
