"""`write_report(store, path, ...)`: load the data, build the page, write one HTML file.

The library entry point of `dyncc report` (controller/report/cli.py) and of the demo.  Data
comes from controller/report/data.py; the page (cards and sections) from page.py, whose sections
are in sections_fleet.py (population over time), sections_trials.py (the one effect model,
through trials.py) and sections_did.py (the treated-versus-holdout difference in differences, a
secondary population check only); plots from plots.py, the HTML from html.py.  Sections without
data say so; the report never fails for lack of data.  The file is written atomically with mode
0644 (dyncc_common.files).  `build_page` and `effects` are re-exported here for their importers.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from controller.evidence.settings import EvidenceSettings
from controller.report import data as report_data
from controller.report.asn import AsnTable, load_asn_file
from controller.report.page import build_page as build_page
from controller.report.sections_did import effects as effects
from controller.store import Store
from dyncc_common.files import atomic_write

log = logging.getLogger("dyncc.report")

DEFAULT_TITLE = "dyncc: dynamic congestion control report"
REPORT_MODE = 0o644


@dataclass
class ReportSummary:
    path: Path
    window: report_data.Window | None
    pops: list[str]
    sections: dict[str, bool] = field(default_factory=dict)  # section key -> has data (a plot or a table)
    bytes: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        drawn = sum(self.sections.values())
        span = "no data"
        if self.window:
            w = self.window
            end = f"{w.end:%H:%M}" if w.end.date() == w.start.date() else f"{w.end:%Y-%m-%d %H:%M}"
            span = f"{w.start:%Y-%m-%d %H:%M}–{end} UTC"
        return (
            f"report {self.path} ({self.bytes / 1024:.0f} KiB, {drawn}/{len(self.sections)} sections with data, "
            f"POPs {','.join(self.pops) or '-'}, {span}) in {self.seconds:.1f} s"
        )


def write_report(
    store: Store,
    path: str | os.PathLike[str],
    *,
    pop: str = "",
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    title: str | None = None,
    asn_file: str | os.PathLike[str] | None = None,
    asn_table: AsnTable | None = None,
    bucket_seconds: int | None = None,
    evidence: EvidenceSettings | None = None,
    min_bytes: int = report_data.MIN_BYTES,
    include_app_limited: bool = False,
) -> ReportSummary:
    """Write the report for `store` to `path` (atomically, mode 0644) and return what it contains.

    Window: `since`/`until` (naive = UTC); by default the last 24 h of telemetry present.
    `asn_file` (CSV prefix,asn[,name]) or `asn_table` enables the per-ISP section.
    `bucket_seconds`: plot resolution; default 5 minutes, finer for windows under 2 h.
    `evidence` (default EvidenceSettings()), `min_bytes`, `include_app_limited`: the effect model's
    settings, as the controller and the lab use them.
    """
    started = time.monotonic()
    if asn_table is None and asn_file is not None:
        asn_table = load_asn_file(asn_file)
    data = report_data.load(
        store,
        pop=pop,
        since=since,
        until=until,
        asn_table=asn_table,
        bucket_seconds=bucket_seconds,
        evidence=evidence,
        min_bytes=min_bytes,
        include_app_limited=include_app_limited,
    )
    page, sections = build_page(data, title or DEFAULT_TITLE, pop)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, page.encode(), REPORT_MODE)
    summary = ReportSummary(
        out,
        data.window,
        data.pops,
        {s.key: s.has_data for s in sections},
        len(page.encode()),
        time.monotonic() - started,
    )
    log.info("%s", summary.line())
    return summary
