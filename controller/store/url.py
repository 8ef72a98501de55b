"""Store URLs: clickhouse://user:pass@host:port/database?options and chdb:///path?database=...&options.

parse_store_url() checks the scheme, database name and options and returns a StoreURL;
check_identifier() accepts a database or table name only if it is a plain identifier."""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dyncc_common.errors import StoreError

if TYPE_CHECKING:
    pass


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class StoreURL:
    scheme: str
    host: str
    port: int
    user: str
    password: str
    database: str
    path: str
    options: dict[str, str]

    def redacted(self) -> str:
        if self.scheme == "chdb":
            return f"chdb://{self.path}?database={self.database}"
        auth = f"{self.user}@" if self.user else ""
        cluster = f"?cluster={self.options['cluster']}" if self.options.get("cluster") else ""
        return f"clickhouse://{auth}{self.host}:{self.port}/{self.database}{cluster}"


def parse_store_url(url: str) -> StoreURL:
    """Parse and validate a store URL; raise StoreError with the reason."""
    parts = urllib.parse.urlsplit(url)
    options = dict(urllib.parse.parse_qsl(parts.query))
    if parts.scheme == "clickhouse":
        if not parts.hostname:
            raise StoreError(f"store URL {url!r} has no host (clickhouse://user:pass@host:port/db)")
        try:
            port = parts.port or 9000
        except ValueError as exc:
            raise StoreError(f"store URL {url!r}: bad port") from exc
        database = parts.path.lstrip("/") or "default"
        if not _IDENT.match(database):
            raise StoreError(f"store URL {url!r}: bad database name {database!r}")
        for alt in filter(None, options.get("alt_hosts", "").split(",")):
            host, _, alt_port = alt.rpartition(":")
            if not host or not alt_port.isdigit() or not 0 < int(alt_port) < 65536:
                raise StoreError(f"store URL {url!r}: bad alt_hosts entry {alt!r} (host:port,host:port)")
        if "cluster" in options and not _IDENT.match(options["cluster"]):
            raise StoreError(f"store URL {url!r}: bad cluster name {options['cluster']!r}")
        return StoreURL(
            "clickhouse",
            parts.hostname,
            port,
            urllib.parse.unquote(parts.username or "default"),
            urllib.parse.unquote(parts.password or ""),
            database,
            "",
            options,
        )
    if parts.scheme == "chdb":
        path = urllib.parse.unquote(parts.netloc + parts.path)
        if not path:
            raise StoreError(f"store URL {url!r} has no directory (chdb:///path/dir)")
        database = options.get("database", "dyncc")
        if not _IDENT.match(database):
            raise StoreError(f"store URL {url!r}: bad database name {database!r}")
        if "cluster" in options:
            raise StoreError(f"store URL {url!r}: cluster= needs a ClickHouse server (clickhouse://...)")
        return StoreURL("chdb", "", 0, "", "", database, path, options)
    raise StoreError(
        f"unsupported store URL scheme {parts.scheme + '://' if parts.scheme else url!r}: "
        "use clickhouse://user:pass@host:port/db or chdb:///path/dir"
    )


def check_identifier(name: str) -> str:
    if not _IDENT.match(name):
        raise StoreError(f"bad identifier {name!r}")
    return name
