"""Settings of `dyncc schema` (SchemaSettings): the action and the store URL."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from dyncc_common.settings import CONFIG_FILE, STR, Settings, reuse, setting

__all__ = ["STORE_URL_HELP", "SchemaSettings"]

STORE_URL_HELP = "store URL: clickhouse://user:pass@host:port/db or chdb:///path/dir"


@dataclasses.dataclass(frozen=True)
class SchemaSettings(Settings):
    """Apply the ClickHouse schema migrations."""

    COMPONENT: ClassVar[str] = "schema"

    action: str = setting(
        None, STR, "apply pending migrations / list them", flag="action", choices=("apply", "status"),
        required=True, cli_only=True,
    )  # fmt: skip
    clickhouse: str = setting(None, STR, STORE_URL_HELP, metavar="URL", required=True)
    config: str | None = reuse(CONFIG_FILE)
