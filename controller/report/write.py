"""`write_report(store, path, ...)`: query the store, draw the plots, write one HTML file.

The library entry point of `dyncc report` (controller/report/cli.py) and of the demo.  Data
comes from controller/report/data.py, plots from plots.py, the page from html.py.
Sections without data say so; the report never fails for lack of data.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from controller.report import data as report_data
from controller.report import html as report_html
from controller.report import plots as report_plots
from controller.report.asn import AsnTable, load_asn_file
from controller.report.html import Card, Section, table
from controller.store import Store

log = logging.getLogger("dyncc.report")

DEFAULT_TITLE = "dyncc: dynamic congestion control report"


@dataclass
class ReportSummary:
    path: Path
    window: report_data.Window | None
    pops: list[str]
    sections: dict[str, bool] = field(default_factory=dict)  # section key -> has a plot
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
            f"report {self.path} ({self.bytes / 1024:.0f} KiB, {drawn}/{len(self.sections)} plots, "
            f"POPs {','.join(self.pops) or '-'}, {span}) in {self.seconds:.1f} s"
        )


def _fmt_rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s * 8 / 1e6:.3g} Mbit/s"


def _change(before: float, after: float) -> str:
    if before <= 0 or after <= 0:
        return "–"
    pct = (after / before - 1) * 100
    return f"{pct:+.0f}%" if abs(pct) >= 1 else f"{pct:+.1f}%"


def _per(data: report_data.ReportData) -> str:
    """The time resolution in words: "5 minutes", "20 s"."""
    b = data.bucket_seconds
    return "5 minutes" if b == 300 else (f"{b // 60} minutes" if b % 60 == 0 and b > 60 else f"{b}\u00a0s")


def _delivery_section(data: report_data.ReportData) -> Section:
    w = data.window
    svg = report_plots.delivery_rate_svg(data.delivery, data.configs, w) if w else None
    notes = []
    if svg is not None and data.configs.empty:
        notes.append("No published config version in the window (nothing to mark).")
    return Section(
        "delivery",
        "Delivery rate per POP",
        "Low percentiles (p5, p10) and the median (p50, dashed) of TCP_INFO delivery rate for "
        f"flows larger than 100 KB, per {_per(data)}. Dashed vertical lines are published config "
        "versions: when BBR reaches the worst prefixes, p5/p10 should step up.",
        svg,
        "No telemetry (tcpinfo_5m) for the report window.",
        notes=notes,
    )


def _selections_section(data: report_data.ReportData) -> Section:
    w = data.window
    svg = report_plots.selections_svg(data.selections, w) if w else None
    tables = []
    if svg is not None:
        sel = data.selections
        rows = []
        for pop in sorted(sel["pop"].unique()):
            d = sel[sel["pop"] == pop].sort_values("time")
            rows.append(
                [pop, len(d), int(d["new_selected"].sum()), int(d["on_bbr"].iloc[-1]), int(d["holdout"].iloc[-1])]
            )
        header = ["POP", "rounds", "newly selected", "on BBR (last round)", "holdout (last round)"]
        tables.append(table(header, rows))
    return Section(
        "selections",
        "New prefixes selected per round",
        "How many client prefixes each controller round newly moved to BBR. Consistently poor "
        "prefixes are few and stable, so after the first rounds only a handful are new.",
        svg,
        "No controller rounds (selections) in the report window.",
        tables=tables,
    )


def _treated_section(data: report_data.ReportData) -> Section:
    w = data.window
    summary = report_data.before_after(data.treated_split)
    svg = report_plots.treated_vs_holdout_svg(data.treated, summary, data.configs, w) if w else None
    tables, notes = [], []
    if svg is not None:
        rows, classes = [], []
        for grp in ("treated", "holdout"):
            g = summary[summary["grp"] == grp]
            before = g[g["phase"] == "before"]["p10"]
            after = g[g["phase"] == "after"]["p10"]
            b = float(before.iloc[0]) if len(before) else 0.0
            a = float(after.iloc[0]) if len(after) else 0.0
            n = int((data.groups["grp"] == grp).sum()) if not data.groups.empty else 0
            change = _change(b, a)
            rows.append([grp, n, _fmt_rate(b) if b else "–", _fmt_rate(a) if a else "–", change])
            cls = ""
            if b > 0 and a > 0 and abs(a / b - 1) >= 0.02:  # colour only real changes
                cls = "good" if a > b else "bad"
            classes.append(["", "", "", "", cls])
        tables.append(table(["group", "prefixes", "p10 before", "p10 after", "change"], rows, classes))
        if data.groups.empty or not (data.groups["grp"] == "holdout").any():
            notes.append("No holdout prefixes yet: the control group is a fraction of candidates.")
        notes.append(
            "Before/after is split at each prefix's first round in its group; values are "
            f"the median over {_per(data)} buckets of the p10 delivery rate."
        )
    return Section(
        "treated",
        "Treated versus holdout",
        "Prefixes the controller moved to BBR (treated) against the holdout: equally poor "
        "prefixes deliberately left on CUBIC. The treated group's low percentile rising while the "
        "holdout stays flat is the effect of BBR, not of the time of day.",
        svg,
        "No treated or holdout prefixes with telemetry in the report window.",
        tables=tables,
        notes=notes,
    )


def _isp_section(data: report_data.ReportData) -> Section:
    w = data.window
    isp = data.isp
    lead = (
        "Low-percentile delivery rate (flows > 100 KB) per ISP, by longest-prefix match of "
        "client prefixes against the prefix→ASN file; the largest ISPs by traffic."
    )
    if not isp.enabled:
        return Section(
            "isp",
            "Per-ISP low percentiles",
            lead,
            None,
            "Not enabled: pass --asn-file FILE, a CSV of prefix,asn[,name] lines "
            "(e.g. 198.51.100.0/22,64500,Example Net), to see this section.",
        )
    svg = report_plots.isp_svg(isp.df, data.configs, w) if (w and isp.df is not None) else None
    note = f"{isp.entries} prefix→ASN entries read"
    if isp.malformed:
        note += f", {isp.malformed} malformed lines skipped"
    if isp.unmapped_prefixes:
        note += f"; {isp.unmapped_prefixes} client prefixes matched no entry"
    if isp.dropped_prefixes:
        note += f"; {isp.dropped_prefixes} prefixes of smaller ISPs left out"
    notes = [note + "."]
    return Section(
        "isp",
        "Per-ISP low percentiles",
        lead,
        svg,
        "No client prefix in the window matched the prefix→ASN file.",
        notes=notes,
    )


def _goodput_section(data: report_data.ReportData) -> Section:
    w = data.window
    svg = (
        report_plots.per_pop_lines_svg(
            data.goodput,
            "p10",
            data.configs,
            w,
            "goodput",
            "p10 goodput per POP (approximate)",
            "Mbit/s",
        )
        if w
        else None
    )
    return Section(
        "goodput",
        "p10 goodput (approximate)",
        "Per flow larger than 100 KB: bytes acknowledged divided by the time the socket was busy "
        f"sending (tcpi_busy_time), at its last poll; p10 per POP per {_per(data)}. Approximate: "
        "busy time leaves out the time the client waited between requests and the poll may miss "
        "the end of a flow. The true measure is the goodput in HTTP access logs.",
        svg,
        "No qualifying flows with busy_time in the raw tcpinfo table for the report window.",
    )


def _bbr_share_section(data: report_data.ReportData) -> Section:
    w = data.window
    svg = (
        report_plots.per_pop_lines_svg(
            data.bbr_share,
            "bbr_share",
            data.configs,
            w,
            "bbrshare",
            "Sockets on BBR per POP",
            "% of sockets",
            rate=False,
        )
        if w
        else None
    )
    return Section(
        "bbrshare",
        "Share of sockets on BBR",
        "Share of observed sockets whose congestion control is a BBR variant: it rises when a "
        "config version reaches the edges and new connections from selected prefixes use BBR.",
        svg,
        "No raw socket samples (tcpinfo) in the report window.",
    )


def _cards(data: report_data.ReportData) -> list[Card]:
    cards = [Card("POPs", ", ".join(data.pops) or "–")]
    q = int(data.delivery["qualifying"].sum()) if not data.delivery.empty else 0
    cards.append(Card("socket samples > 100 KB", f"{q:,}"))
    if not data.selections.empty:
        last = data.selections.sort_values("time").groupby("pop").tail(1)
        cards.append(Card("prefixes on BBR (last round)", f"{int(last['on_bbr'].sum()):,}"))
    cards.append(Card("config versions published", str(len(data.configs))))
    summary = report_data.before_after(data.treated_split)
    t = summary[summary["grp"] == "treated"].set_index("phase")["p10"] if not summary.empty else None
    if t is not None and {"before", "after"} <= set(t.index):
        cards.append(Card("treated p10 change", _change(float(t["before"]), float(t["after"]))))
    return cards


def build_page(data: report_data.ReportData, title: str, pop: str = "") -> tuple[str, list[Section]]:
    sections = [
        _delivery_section(data),
        _selections_section(data),
        _treated_section(data),
        _isp_section(data),
        _goodput_section(data),
        _bbr_share_section(data),
    ]
    if data.window is None:
        subtitle = "No telemetry in the store" + (f" for POP {pop}" if pop else "") + "."
    else:
        subtitle = f"{data.window.start:%Y-%m-%d %H:%M} – {data.window.end:%Y-%m-%d %H:%M} UTC" + (
            f" · POP {pop}" if pop else f" · {len(data.pops)} POP(s)"
        )
    footer = f"Generated by dyncc report at {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M:%S} UTC."
    return report_html.render_page(title, subtitle, _cards(data), sections, footer), sections


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
) -> ReportSummary:
    """Write the report for `store` to `path` (atomically) and return what it contains.

    Window: `since`/`until` (naive = UTC); by default the last 24 h of telemetry present.
    `asn_file` (CSV prefix,asn[,name]) or `asn_table` enables the per-ISP section.
    `bucket_seconds`: plot resolution; default 5 minutes, finer for windows under 2 h.
    """
    started = time.monotonic()
    if asn_table is None and asn_file is not None:
        asn_table = load_asn_file(asn_file)
    data = report_data.load(
        store, pop=pop, since=since, until=until, asn_table=asn_table, bucket_seconds=bucket_seconds
    )
    page, sections = build_page(data, title or DEFAULT_TITLE, pop)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(page)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
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
