"""Store URLs: clickhouse://user:pass@host:port/database?options and chdb:///path?database=...&options.

parse_store_url() checks the scheme, database name and options and returns a StoreURL whose
options are typed fields, parsed once here: an unknown option (`secrue=1`), one given twice, one
of the other back end, or a bad value (`connect_timeout=abc`) is a StoreError naming it, before
anything connects (the commands' settings check the URL at start: ConfigError, exit 2).
check_identifier() accepts a database or table name only if it is a plain identifier;
redact_url() is a URL as it may be shown (no password).

ClickHouse TLS and password options (clickhouse-driver's own connect parameters, docs/store.md):
secure=1 (TLS; the default port becomes 9440), ca_certs=FILE (the CA that signed the server's
certificate; default: certifi's bundle), verify=0 (no certificate check: tests only), and
password_file=PATH (the password is the file's one line, read here, so it is never in the URL
or on a command line).  The password is never in repr(), redacted() or an error message.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from dyncc_common.errors import StoreError

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BOOLS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
#: clickhouse-driver's default ports (plain, TLS)
DEFAULT_PORT, DEFAULT_SECURE_PORT = 9000, 9440
#: the options of each back end (docs/store.md, "Options")
CLICKHOUSE_OPTIONS = (
    "connect_timeout", "timeout", "alt_hosts", "cluster", "secure", "ca_certs", "verify", "password_file", "ttl",
)  # fmt: skip
CHDB_OPTIONS = ("database", "ttl")


@dataclass(frozen=True)
class StoreURL:
    scheme: str
    host: str
    port: int
    user: str
    password: str = field(repr=False)  # from the URL or its password_file; never shown
    database: str
    path: str
    secure: bool = False  # TLS to the server (secure=1)
    verify: bool = True  # with secure: check the server's certificate (verify=0: tests only)
    ca_certs: str | None = None  # with secure: the CA file
    connect_timeout: float = 5.0  # seconds
    timeout: float = 300.0  # seconds to wait for an answer (the driver's send_receive_timeout)
    alt_hosts: str = ""  # "host:port,host:port", tried in order when the URL's host does not answer
    cluster: str | None = None  # a cluster of the server's remote_servers (docs/cluster.md)
    ttl: bool = True  # ttl=off: tables without retention TTLs

    def redacted(self) -> str:
        if self.scheme == "chdb":
            return f"chdb://{self.path}?database={self.database}"
        auth = f"{self.user}@" if self.user else ""
        shown = {k: v for k, v in (("cluster", self.cluster), ("secure", "1" if self.secure else None)) if v}
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
            "connect_timeout": self.connect_timeout,
            "send_receive_timeout": self.timeout,
        }
        if self.alt_hosts:  # tried in order when the URL's host does not answer
            args["alt_hosts"] = self.alt_hosts
        if self.secure:
            args["secure"] = True
            args["verify"] = self.verify
            if self.ca_certs:
                args["ca_certs"] = self.ca_certs
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


def _seconds(options: dict[str, str], name: str, default: float, shown: str) -> float:
    if name not in options:
        return default
    try:
        value = float(options[name])
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise StoreError(f"store URL {shown!r}: bad {name}={options[name]!r} (seconds, more than 0)")
    return value


def _options(query: str, scheme: str, shown: str) -> dict[str, str]:
    """The query's options: each a known option of the scheme, given once (StoreError otherwise)."""
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise StoreError(f"store URL {shown!r}: bad options {query!r} (name=value&name=value)") from None
    known, other = (CLICKHOUSE_OPTIONS, CHDB_OPTIONS) if scheme == "clickhouse" else (CHDB_OPTIONS, CLICKHOUSE_OPTIONS)
    options: dict[str, str] = {}
    for name, value in pairs:
        if name in options:
            raise StoreError(f"store URL {shown!r}: option {name}= given twice")
        if name not in known:
            if name in other and scheme == "chdb":
                raise StoreError(f"store URL {shown!r}: {name}= needs a ClickHouse server (clickhouse://...)")
            if name in other:
                raise StoreError(f"store URL {shown!r}: {name}= is for chdb://; the database is the URL's path")
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]}=?)" if close else f" (known: {', '.join(known)})"
            raise StoreError(f"store URL {shown!r}: unknown option {name!r}{hint}")
        options[name] = value
    return options


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


def _check_tls(options: dict[str, str], shown: str, files: bool) -> tuple[bool, bool]:
    """secure=, verify=, ca_certs= checked; (secure, verify)."""
    secure = bool(_flag(options, "secure", shown))
    verify = _flag(options, "verify", shown)
    for name in ("verify", "ca_certs"):
        if name in options and not secure:
            raise StoreError(f"store URL {shown!r}: {name}= applies to TLS connections: add secure=1")
    ca_certs = options.get("ca_certs")
    if files and ca_certs is not None and not os.path.isfile(ca_certs):
        raise StoreError(f"store URL {shown!r}: ca_certs {ca_certs} is not a file")
    return secure, verify is not False


def parse_store_url(url: str, *, files: bool = True) -> StoreURL:
    """Parse and validate a store URL; raise StoreError with the reason.

    files=False: the syntax and the options only, no file read (ca_certs=, password_file=: the
    settings' check at start, where a deployed file need not exist on the machine checking it);
    the password is then "" for a password_file."""
    shown = redact_url(url)
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:
        raise StoreError(f"store URL {shown!r}: {exc}") from None
    if parts.scheme not in ("clickhouse", "chdb"):
        raise StoreError(
            f"unsupported store URL scheme {parts.scheme + '://' if parts.scheme else shown!r}: "
            "use clickhouse://user:pass@host:port/db or chdb:///path/dir"
        )
    options = _options(parts.query, parts.scheme, shown)
    ttl = _flag(options, "ttl", shown) is not False
    if parts.scheme == "chdb":
        path = urllib.parse.unquote(parts.netloc + parts.path)
        if not path:
            raise StoreError(f"store URL {shown!r} has no directory (chdb:///path/dir)")
        database = options.get("database", "dyncc")
        if not _IDENT.match(database):
            raise StoreError(f"store URL {shown!r}: bad database name {database!r}")
        return StoreURL("chdb", "", 0, "", "", database, path, ttl=ttl)
    if not parts.hostname:
        raise StoreError(f"store URL {shown!r} has no host (clickhouse://user:pass@host:port/db)")
    secure, verify = _check_tls(options, shown, files)
    try:
        port = parts.port or (DEFAULT_SECURE_PORT if secure else DEFAULT_PORT)
    except ValueError:
        raise StoreError(f"store URL {shown!r}: bad port") from None
    database = parts.path.lstrip("/") or "default"
    if not _IDENT.match(database):
        raise StoreError(f"store URL {shown!r}: bad database name {database!r}")
    alt_hosts = options.get("alt_hosts", "")
    for alt in filter(None, alt_hosts.split(",")):
        host, _, alt_port = alt.rpartition(":")
        if not host or not alt_port.isdigit() or not 0 < int(alt_port) < 65536:
            raise StoreError(f"store URL {shown!r}: bad alt_hosts entry {alt!r} (host:port,host:port)")
    cluster = options.get("cluster")
    if cluster is not None and not _IDENT.match(cluster):
        raise StoreError(f"store URL {shown!r}: bad cluster name {cluster!r}")
    password = urllib.parse.unquote(parts.password or "")
    if "password_file" in options:
        if password:
            raise StoreError(f"store URL {shown!r}: a password and a password_file: give one")
        password = _read_password(options["password_file"], shown) if files else ""
    return StoreURL(
        "clickhouse",
        parts.hostname,
        port,
        urllib.parse.unquote(parts.username or "default"),
        password,
        database,
        "",
        secure=secure,
        verify=verify,
        ca_certs=options.get("ca_certs") or None,
        connect_timeout=_seconds(options, "connect_timeout", 5.0, shown),
        timeout=_seconds(options, "timeout", 300.0, shown),
        alt_hosts=alt_hosts,
        cluster=cluster,
        ttl=ttl,
    )


def check_identifier(name: str) -> str:
    if not _IDENT.match(name):
        raise StoreError(f"bad identifier {name!r}")
    return name
