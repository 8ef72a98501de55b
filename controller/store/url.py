"""Store URLs: clickhouse://user:pass@host:port/database?options and chdb:///path?database=...&options.

parse_store_url() checks the scheme, database name and options and returns a StoreURL;
check_identifier() accepts a database or table name only if it is a plain identifier;
redact_url() is a URL as it may be shown (no password).

ClickHouse TLS and password options (clickhouse-driver's own connect parameters, docs/store.md):
secure=1 (TLS; the default port becomes 9440), ca_certs=FILE (the CA that signed the server's
certificate; default: certifi's bundle), verify=0 (no certificate check: tests only), and
password_file=PATH (the password is the file's one line, read here, so it is never in the URL
or on a command line).  The password is never in repr(), redacted() or an error message.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dyncc_common.errors import StoreError

if TYPE_CHECKING:
    pass


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BOOLS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
#: clickhouse-driver's default ports (plain, TLS)
DEFAULT_PORT, DEFAULT_SECURE_PORT = 9000, 9440


@dataclass(frozen=True)
class StoreURL:
    scheme: str
    host: str
    port: int
    user: str
    password: str = field(repr=False)  # from the URL or its password_file; never shown
    database: str
    path: str
    options: dict[str, str]

    @property
    def secure(self) -> bool:
        """TLS to the server (secure=1)."""
        return _BOOLS.get(self.options.get("secure", "0").lower(), False)

    def redacted(self) -> str:
        if self.scheme == "chdb":
            return f"chdb://{self.path}?database={self.database}"
        auth = f"{self.user}@" if self.user else ""
        shown = {k: self.options[k] for k in ("cluster", "secure") if self.options.get(k)}
        query = f"?{urllib.parse.urlencode(shown)}" if shown else ""
        return f"clickhouse://{auth}{self.host}:{self.port}/{self.database}{query}"

    def connect_args(self) -> dict[str, Any]:
        """clickhouse_driver.Client keyword arguments but the database and settings: address,
        credentials, timeouts, alt_hosts, TLS."""
        args: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "connect_timeout": float(self.options.get("connect_timeout", 5)),
            "send_receive_timeout": float(self.options.get("timeout", 300)),
        }
        if self.options.get("alt_hosts"):  # tried in order when the URL's host does not answer
            args["alt_hosts"] = self.options["alt_hosts"]
        if self.secure:
            args["secure"] = True
            args["verify"] = _BOOLS[self.options.get("verify", "1").lower()]
            if self.options.get("ca_certs"):
                args["ca_certs"] = self.options["ca_certs"]
        return args


def redact_url(url: str) -> str:
    """`url` with its password (if any) replaced by ***: a URL as it may be shown."""
    try:
        parts = urllib.parse.urlsplit(url)
        if parts.password is None:
            return url
        host = parts.netloc.rpartition("@")[2]
        return urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))
    except ValueError:
        return "<unparsable store URL>"


def _flag(options: dict[str, str], name: str, shown: str) -> bool | None:
    if name not in options:
        return None
    value = _BOOLS.get(options[name].lower())
    if value is None:
        raise StoreError(f"store URL {shown!r}: bad {name}={options[name]!r} (1 or 0)")
    return value


def _read_password(path: str, shown: str) -> str:
    """The password_file's one line (its line break dropped); its contents are never in an error."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise StoreError(f"store URL {shown!r}: cannot read password_file {path}: {reason}") from None
    password = text.rstrip("\r\n")
    if not password:
        raise StoreError(f"store URL {shown!r}: password_file {path} is empty")
    if "\n" in password:
        raise StoreError(f"store URL {shown!r}: password_file {path} has more than one line")
    return password


def _check_tls(options: dict[str, str], shown: str) -> bool:
    """secure=, verify=, ca_certs= checked; True for TLS."""
    secure = bool(_flag(options, "secure", shown))
    _flag(options, "verify", shown)
    for name in ("verify", "ca_certs"):
        if name in options and not secure:
            raise StoreError(f"store URL {shown!r}: {name}= applies to TLS connections: add secure=1")
    ca_certs = options.get("ca_certs")
    if ca_certs is not None and not os.path.isfile(ca_certs):
        raise StoreError(f"store URL {shown!r}: ca_certs {ca_certs} is not a file")
    return secure


def parse_store_url(url: str) -> StoreURL:
    """Parse and validate a store URL; raise StoreError with the reason."""
    shown = redact_url(url)
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:
        raise StoreError(f"store URL {shown!r}: {exc}") from None
    options = dict(urllib.parse.parse_qsl(parts.query))
    if parts.scheme == "clickhouse":
        if not parts.hostname:
            raise StoreError(f"store URL {shown!r} has no host (clickhouse://user:pass@host:port/db)")
        secure = _check_tls(options, shown)
        try:
            port = parts.port or (DEFAULT_SECURE_PORT if secure else DEFAULT_PORT)
        except ValueError:
            raise StoreError(f"store URL {shown!r}: bad port") from None
        database = parts.path.lstrip("/") or "default"
        if not _IDENT.match(database):
            raise StoreError(f"store URL {shown!r}: bad database name {database!r}")
        for alt in filter(None, options.get("alt_hosts", "").split(",")):
            host, _, alt_port = alt.rpartition(":")
            if not host or not alt_port.isdigit() or not 0 < int(alt_port) < 65536:
                raise StoreError(f"store URL {shown!r}: bad alt_hosts entry {alt!r} (host:port,host:port)")
        if "cluster" in options and not _IDENT.match(options["cluster"]):
            raise StoreError(f"store URL {shown!r}: bad cluster name {options['cluster']!r}")
        password = urllib.parse.unquote(parts.password or "")
        if "password_file" in options:
            if password:
                raise StoreError(f"store URL {shown!r}: a password and a password_file: give one")
            password = _read_password(options["password_file"], shown)
        return StoreURL(
            "clickhouse",
            parts.hostname,
            port,
            urllib.parse.unquote(parts.username or "default"),
            password,
            database,
            "",
            options,
        )
    if parts.scheme == "chdb":
        path = urllib.parse.unquote(parts.netloc + parts.path)
        if not path:
            raise StoreError(f"store URL {shown!r} has no directory (chdb:///path/dir)")
        database = options.get("database", "dyncc")
        if not _IDENT.match(database):
            raise StoreError(f"store URL {shown!r}: bad database name {database!r}")
        if "cluster" in options:
            raise StoreError(f"store URL {shown!r}: cluster= needs a ClickHouse server (clickhouse://...)")
        return StoreURL("chdb", "", 0, "", "", database, path, options)
    raise StoreError(
        f"unsupported store URL scheme {parts.scheme + '://' if parts.scheme else shown!r}: "
        "use clickhouse://user:pass@host:port/db or chdb:///path/dir"
    )


def check_identifier(name: str) -> str:
    if not _IDENT.match(name):
        raise StoreError(f"bad identifier {name!r}")
    return name
