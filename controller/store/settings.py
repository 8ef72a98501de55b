"""Settings of `dyncc schema` (SchemaSettings): the action, the store URL and the cluster."""

from __future__ import annotations

import dataclasses
import re
import urllib.parse
from typing import ClassVar

from controller.store.url import parse_store_url
from dyncc_common.errors import ConfigError, StoreError
from dyncc_common.settings import CONFIG_FILE, STR, Settings, reuse, setting

__all__ = ["STORE_URL_HELP", "SchemaSettings", "check_store_url"]

STORE_URL_HELP = (
    "store URL: clickhouse://user@host:port/db or chdb:///path/dir; a ClickHouse cluster: "
    "clickhouse://user@host:port/db?cluster=NAME; TLS: ?secure=1&ca_certs=FILE; "
    "a password: ?password_file=FILE; an unknown option is refused (docs/store.md)"
)


def check_store_url(value: str, what: str) -> str:
    """The validator of every --clickhouse: the URL and its options parse (ConfigError: exit 2 at
    start).  Its files (ca_certs=, password_file=) are read when the store is opened."""
    try:
        parse_store_url(value, files=False)
    except StoreError as exc:
        raise ConfigError(str(exc)) from None
    return value


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclasses.dataclass(frozen=True)
class SchemaSettings(Settings):
    """Apply the ClickHouse schema migrations."""

    COMPONENT: ClassVar[str] = "schema"

    action: str = setting(
        None, STR, "apply pending migrations / list them", flag="action", choices=("apply", "status"),
        required=True, cli_only=True,
    )  # fmt: skip
    clickhouse: str = setting(None, STR, STORE_URL_HELP, metavar="URL", required=True, validator=check_store_url)
    cluster: str | None = setting(
        None, STR,
        "create the schema on this cluster of the server's remote_servers (sharded, replicated tables "
        "and Distributed tables; every node must answer); the same as ?cluster=NAME in the URL",
        metavar="NAME",
    )  # fmt: skip
    config: str | None = reuse(CONFIG_FILE)

    def __post_init__(self) -> None:
        if self.cluster is None:
            return
        if not _NAME.match(self.cluster):
            raise ConfigError(f"bad --cluster {self.cluster!r}: must be a name (letters, digits, _)")
        parts = urllib.parse.urlsplit(self.clickhouse)
        if parts.scheme != "clickhouse":
            raise ConfigError("--cluster needs a ClickHouse server URL (clickhouse://...)")
        given = dict(urllib.parse.parse_qsl(parts.query)).get("cluster")
        if given is not None and given != self.cluster:
            raise ConfigError(f"--cluster {self.cluster} contradicts the URL's cluster={given}")

    @property
    def store_url(self) -> str:
        """The store URL with the cluster option, when one is given."""
        if self.cluster is None:
            return self.clickhouse
        parts = urllib.parse.urlsplit(self.clickhouse)
        query = {**dict(urllib.parse.parse_qsl(parts.query)), "cluster": self.cluster}
        return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
