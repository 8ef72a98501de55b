"""Settings of `dyncc report` (ReportSettings): the store, the window, the output file."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from controller.store.settings import STORE_URL_HELP, check_store_url
from dyncc_common.names import check_pop
from dyncc_common.settings import CONFIG_FILE, STR, VERBOSE, Settings, reuse, setting

__all__ = ["ReportSettings"]


def _pop(value: str, what: str) -> str:
    return check_pop(value, what) if value else value


@dataclasses.dataclass(frozen=True)
class ReportSettings(Settings):
    """Write the self-contained HTML report for a store."""

    COMPONENT: ClassVar[str] = "report"

    clickhouse: str = setting(
        None, STR, STORE_URL_HELP, metavar="URL", validator=check_store_url,
        required=True,
    )  # fmt: skip
    output: str = setting("report.html", STR, "HTML file to write", short="-o", metavar="FILE")
    pop: str = setting("", STR, "only this POP", default_text="all", validator=_pop)
    since: str | None = setting(
        None, STR, "window start: ISO time (UTC unless it has an offset) or a duration before --until such as 6h",
        metavar="TIME", default_text="24h",
    )  # fmt: skip
    until: str | None = setting(
        None, STR, "window end: ISO time", metavar="TIME", default_text="the end of the latest telemetry"
    )
    title: str | None = setting(None, STR, "page title")
    asn_file: str | None = setting(
        None, STR, "prefix,asn[,name] CSV: enables the per-ISP section (longest-prefix match)", metavar="CSV"
    )
    bucket: str | None = setting(
        None, STR, "plot resolution, e.g. 5m or 20s", metavar="DURATION",
        default_text="5m from the rollup; finer, from the raw table, for windows under 2 h",
    )  # fmt: skip
    verbose: bool = reuse(VERBOSE)
    config: str | None = reuse(CONFIG_FILE)
