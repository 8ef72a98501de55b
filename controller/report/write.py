"""`write_report(store, path, ...)`: query the store, draw the plots, write one HTML file.

The library entry point of `dyncc report` (controller/report/cli.py) and of the demo.  Data
comes from controller/report/data.py; the headline effects and the per-prefix trial table from
the one effect model (controller/evidence, through trials.py); the treated-versus-holdout
difference in differences of effects.py is a secondary population check only; plots from
plots.py, the page from html.py.  Sections without data say so; the report never fails for lack
of data.  The file is written atomically with mode 0644 (dyncc_common.files).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from controller.evidence.model import pct
from controller.evidence.settings import EvidenceSettings
from controller.report import data as report_data
from controller.report import effects as report_effects
from controller.report import html as report_html
from controller.report import plots as report_plots
from controller.report import trials as report_trials
from controller.report.asn import AsnTable, load_asn_file
from controller.report.html import Card, Section, table
from controller.store import Store
from dyncc_common.files import atomic_write

log = logging.getLogger("dyncc.report")

DEFAULT_TITLE = "dyncc: dynamic congestion control report"
#: the population check's metrics: key -> label (the key names the effects.py input in ReportData)
METRICS = {"delivery": "p10 delivery rate", "goodput": "p10 goodput"}
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
            in_trial = int(d["in_trial"].iloc[-1]) if "in_trial" in d else 0
            rows.append(
                [
                    pop,
                    len(d),
                    int(d["new_selected"].sum()),
                    int(d["on_bbr"].iloc[-1]),
                    in_trial,
                    int(d["holdout"].iloc[-1]),
                ]
            )
        header = [
            "POP",
            "rounds",
            "newly selected",
            "on BBR (last round)",
            "in a trial (last round)",
            "holdout (last round)",
        ]
        tables.append(table(header, rows))
    notes = []
    if not data.pins.empty:
        pins = [
            [r.pop, r.prefix, r.algorithm, r.who, f"{r.time:%Y-%m-%d %H:%M}", r.why]
            for r in data.pins.itertuples(index=False)
        ]
        tables.append(table(["POP", "prefix", "pinned to", "by", "since (UTC)", "why"], pins))
        notes.append(
            f"{len(pins)} prefix(es) pinned by an operator ('dyncc control pin'): every round keeps them on the "
            "pinned algorithm whatever their scores, trials and the caps say; a bbr pin is in the POP's signed "
            "config, a cubic pin is not. Pinned prefixes are not counted as treated or holdout."
        )
    return Section(
        "selections",
        "New prefixes selected per round",
        "How many client prefixes each controller round newly selected (a selection starts a trial of "
        "BBR and CUBIC blocks). Consistently poor prefixes are few and stable, so after the first rounds "
        "only a handful are new. On BBR counts the prefixes kept on BBR and the trials in a BBR block.",
        svg,
        "No controller rounds (selections) in the report window.",
        tables=tables,
        notes=notes,
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
        "Prefixes the controller selected (treated: their trial's BBR and CUBIC blocks, then BBR if kept) "
        "against the holdout: equally poor prefixes deliberately left on CUBIC. A population view over "
        "time; the effect of BBR is the trials' figure above.",
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
    if data.goodput_source == report_data.GOODPUT_BUSY:
        svg = (
            report_plots.goodput_svg(data.goodput, None, data.configs, w, "Goodput per POP (approximate)")
            if w
            else None
        )
        why = data.goodput_why or "no access-log rows (http_requests) in the report window"
        return Section(
            "goodput",
            "Goodput (fallback: approximate, from busy_time)",
            "Per flow larger than 100 KB: bytes acknowledged divided by the time the socket was busy "
            f"sending (tcpi_busy_time), at its last poll; p10 (solid) and p50 (dashed) per POP per "
            f"{_per(data)}. Approximate: busy time leaves out the time the client waited between "
            "requests and the poll may miss the end of a flow.",
            svg,
            "No qualifying flows with busy_time in the raw tcpinfo table for the report window.",
            notes=[
                f"Fallback: {why}, so this section shows the busy_time approximation, not the "
                "goodput of HTTP requests (bytes_sent / request_time from the access logs)."
            ],
        )
    svg = (
        report_plots.goodput_svg(data.goodput, data.goodput_groups, data.configs, w, "Goodput per POP (HTTP requests)")
        if w
        else None
    )
    notes = []
    missing = [p for p in data.pops if p not in data.http_pops]
    if missing:
        notes.append(f"No access-log rows in the window for POP(s) {', '.join(missing)}: no goodput lines for them.")
    if svg is not None:
        requests = int(data.goodput["requests"].sum())
        notes.append(f"{requests:,} qualifying requests in the window.")
    return Section(
        "goodput",
        "Goodput (HTTP requests)",
        "Per HTTP response with status 200 and more than 1 MiB sent: bytes_sent / request_time "
        "from the edge web servers' access logs (http_requests). p10 (solid) and p50 (dashed) per "
        f"POP per {_per(data)}; below, the p10 of treated versus holdout prefixes.",
        svg,
        "Access-log rows exist in the window, but no response qualifies (status 200, > 1 MiB, request_time > 0).",
        notes=notes,
    )


def _pct(value: float) -> str:
    if not math.isfinite(value):
        return "–"
    pct = value * 100
    return f"{pct:+.0f}%" if abs(pct) >= 10 else f"{pct:+.1f}%"


def effects(data: report_data.ReportData) -> dict[str, list[report_effects.Did]]:
    """The DiD per metric (METRICS keys with data to compute from) per POP and over all POPs."""
    inputs = {"delivery": data.effect_delivery}
    if data.goodput_source == report_data.GOODPUT_HTTP:
        inputs["goodput"] = data.effect_goodput
    return {key: report_effects.did_by_pop(df, data.pops, data.groups) for key, df in inputs.items()}


def _did_row(d: report_effects.Did) -> tuple[list[str], list[str]]:
    t, h = d.treated, d.holdout
    note = [d.reason or d.note]
    left_out = []
    for g in (t, h):
        why = {"no before data": g.no_before, "no after data": g.no_after, "too few samples": g.too_few}
        if any(why.values()):
            left_out.append(f"{g.grp} {sum(why.values())} ({', '.join(f'{k} {n}' for k, n in why.items() if n)})")
    if left_out:
        note.append("not counted: " + ", ".join(left_out))
    interval = "–"
    if d.has_interval and d.ci_low is not None and d.ci_high is not None:
        interval = f"{_pct(d.ci_low)} … {_pct(d.ci_high)}"
    cells = [
        d.scope,
        _pct(d.estimate) if d.estimate is not None else "–",
        interval,
        _pct(t.change),
        _pct(h.change),
        f"{t.prefixes} / {h.prefixes}",
        f"{t.samples_before:,} / {t.samples_after:,}",
        f"{h.samples_before:,} / {h.samples_after:,}",
        "; ".join(n for n in note if n),
    ]
    cls = ""
    if d.has_interval:
        assert d.ci_low is not None and d.ci_high is not None
        cls = "good" if d.ci_low > 0 else ("bad" if d.ci_high < 0 else "")
    return cells, ["", cls, cls, "", "", "", "", "", ""]


def _did_section(data: report_data.ReportData, results: dict[str, list[report_effects.Did]]) -> Section:
    header = [
        "POP",
        "DiD",
        "95% CI",
        "treated change",
        "holdout change",
        "prefixes treated / holdout",
        "treated samples before / after",
        "holdout samples before / after",
        "note",
    ]
    tables, notes, plot_rows = [], [], []
    for key, label in METRICS.items():
        if key not in results:
            continue
        rows, classes = [], []
        for d in results[key]:
            cells, cls = _did_row(d)
            rows.append(cells)
            classes.append(cls)
            if d.ok:
                assert d.estimate is not None and d.ci_low is not None and d.ci_high is not None
                scope_id = "all" if d.scope == report_effects.ALL else d.scope
                plot_rows.append((f"{key}-{scope_id}", f"{label} · {d.scope}", key, d.estimate, d.ci_low, d.ci_high))
        if rows:
            tables.append(f"<h3>{report_html.esc(label)}</h3>" + table(header, rows, classes))
    if "goodput" not in results and data.window is not None:
        notes.append(f"p10 goodput: not computed: {data.goodput_why or 'no access-log rows in the window'}.")
    if tables:
        samples = "qualifying socket polls (flows > 100 KB) for the delivery rate, requests for goodput"
        notes.append(
            f"95% CI: percentile cluster bootstrap, {report_effects.RESAMPLES} resamples of prefixes within each "
            f"group (seed {report_effects.SEED}). A prefix counts with at least {report_effects.MIN_SAMPLES} "
            f"samples ({samples}) both before and after it entered its group, within the report window; the "
            "bucket holding that moment (delivery rate) or a request spanning it (goodput) counts in neither."
        )
    svg = (
        report_plots.effect_svg(
            plot_rows,
            "did",
            "Population check: treated versus holdout (difference in differences)",
            "treated change relative to holdout change, % (dot: estimate, line: 95% CI)",
        )
        if data.window
        else None
    )
    return Section(
        "did",
        "Population check: treated versus holdout (difference in differences)",
        "Not the effect of BBR (that is the trials' figure above): a check on the whole population. "
        "For each prefix, the change of its p10 from before to after it entered its group (treated: "
        "selected, its trial's CUBIC blocks and a revert included; holdout: equally poor prefixes kept on "
        "CUBIC). Group change = geometric mean of the prefixes' after/before ratios; DiD = "
        "(T_after/T_before) / (H_after/H_before) − 1: what running dyncc did to the prefixes it selected, "
        "beyond what the time alone did to the holdout.",
        svg,
        "No estimate: the table says why for each POP." if tables else "No treated or holdout prefixes.",
        tables=tables,
        notes=notes,
    )


def _which_id(which: str) -> str:
    return "inforce" if which == report_trials.IN_FORCE else "trials"


def _pool_table(pools: list[report_trials.Pool]) -> str:
    by: dict[tuple[str, str], dict[str, report_trials.Pool]] = {}
    for pool in pools:
        by.setdefault((pool.scope, pool.which), {})[pool.metric] = pool
    header = [
        "scope",
        "prefixes",
        "p10 delivery rate",
        "smallest detectable",
        "p10 goodput",
        "smallest detectable",
        "prefixes with an effect (delivery / goodput)",
        "trials",
        "samples",
    ]
    rows, classes = [], []
    for (scope, which), metrics in by.items():
        d, g = metrics["delivery"], metrics["goodput"]
        de, ge = d.effect, g.effect
        rows.append(
            [
                f"{scope}: {report_trials.WHICH[which]}",
                f"{d.prefixes:,}",
                de.text(),
                report_trials.mde_text(de),
                ge.text(),
                report_trials.mde_text(ge),
                f"{de.prefixes if de.ok else 0:,} / {ge.prefixes if ge.ok else 0:,}",
                f"{de.n_b:,}",
                f"{de.samples:,}",
            ]
        )
        classes.append(["", "", report_trials.effect_class(de), "", report_trials.effect_class(ge), "", "", "", ""])
    return table(header, rows, classes)


def _effect_section(data: report_data.ReportData, pools: list[report_trials.Pool]) -> Section:
    td = data.trials
    tables, notes, plot_rows = [], [], []
    level = int((td.cfg.level if td else EvidenceSettings().level) * 100)  # as summary_line words it
    if td is not None and td.trials:
        for pool in pools:
            e = pool.effect
            if not e.ok:
                continue
            scope_id = "all" if pool.scope == report_trials.ALL else pool.scope
            label = f"{report_trials.METRICS[pool.metric]} · {pool.which} · {pool.scope}"
            gid = f"{pool.metric}-{_which_id(pool.which)}-{scope_id}"
            plot_rows.append((gid, label, pool.metric, e.estimate, e.low, e.high))
        tables.append("<h3>Pooled effects</h3>" + _pool_table(pools))
        notes.append(
            f"Per prefix: BBR blocks against CUBIC blocks of its trial, Welch's {level}% interval on the log of "
            "each bucket's p10; pooled: DerSimonian-Laird random effects over the prefixes (each prefix's latest "
            "trial), a normal interval, and the smallest effect the data could have detected (two-sided at "
            f"{level}%, 80% power). Goodput: the access-log requests of each bucket, given the arm of the same "
            "prefix's tcpinfo bucket. docs/report.md defines each figure and its assumptions."
        )
    svg = (
        report_plots.effect_svg(
            plot_rows,
            "effect",
            "Effect of BBR: each prefix's BBR blocks against its CUBIC blocks, pooled",
            f"effect on the p10, % (dot: estimate, line: {level}% interval)",
        )
        if data.window
        else None
    )
    no_data = "No trial ran in the report window, so there is no effect figure."
    if td is not None and td.trials:
        no_data = "No trial has an effect yet: the table of trials below says why for each prefix."
    return Section(
        "effect",
        "Effect of BBR (per-prefix trials)",
        "A newly selected prefix runs a trial: randomised blocks of BBR and CUBIC for the whole prefix. "
        "Every sample counts for the congestion control its socket actually ran. The effect is how much "
        "higher the p10 was in the BBR blocks than in the CUBIC blocks; pooled over the prefixes in force "
        "(kept on BBR by their trial) and over all trials (the unbiased figure).",
        svg,
        no_data,
        tables=tables,
        notes=notes,
    )


def _trials_section(data: report_data.ReportData) -> Section:
    td = data.trials
    tables, notes = [], []
    if td is not None and td.trials:
        rows = report_trials.rows(td)
        header = [
            "POP",
            "prefix",
            "trial start (UTC)",
            "blocks / rounds",
            "bbr / cubic buckets",
            "samples",
            "p10 delivery rate",
            "p10 goodput",
            "decision",
            "why",
        ]
        tables.append(table(header, [r.cells for r in rows], [r.classes for r in rows]))
        if len(td.trials) > len(rows):
            notes.append(
                f"The newest {len(rows)} of {len(td.trials)} trials in the window; "
                f"{len(td.trials) - len(rows)} older ones are not shown (they are in the pooled figures)."
            )
        notes.append(
            "Buckets and samples: the delivery-rate buckets that belong to one arm (at least "
            f"{td.cfg.purity:.0%} of their qualifying samples on it and at least {td.cfg.min_arm_samples} "
            "of them) within the trial's blocks, and the samples in them. Why: the reason the controller "
            "stored with the decision that ended the trial (a running trial: its latest round's)."
        )
    return Section(
        "trials",
        "Per-prefix trials",
        "Every trial that ran in the window, newest first: its blocks, the buckets and samples on each arm, "
        "the effect on the p10 delivery rate and on the p10 goodput with their intervals, and the decision "
        "(keep, revert, or running) with its reason.",
        None,
        "No trial ran in the report window.",
        tables=tables,
        notes=notes,
        table_only=True,
    )


def _trial_effect_text(r: object) -> str:
    since = int(getattr(r, "trial_since_ts", 0) or 0)
    if since <= 0:
        return "no trial"
    est, lo, hi = (float(getattr(r, name)) for name in ("trial_effect", "trial_low", "trial_high"))
    if not math.isfinite(est):
        return "n/a"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return f"{pct(est)} [no interval]"
    return f"{pct(est)} [{pct(lo)}, {pct(hi)}]"


def _reverted_section(data: report_data.ReportData) -> Section:
    rev = data.reverted
    tables, notes = [], []
    if data.window is not None and not rev.empty:
        rows = []
        for r in rev.itertuples(index=False):
            base, low = float(r.selected_low_rate), float(r.low_delivery_rate)  # type: ignore[arg-type]
            rates = f"{_fmt_rate(base)} → {_fmt_rate(low)}" if base > 0 and low > 0 else "–"
            rows.append([f"{r.time:%Y-%m-%d %H:%M}", r.pop, r.prefix, rates, _trial_effect_text(r), r.reason])
        header = [
            "round (UTC)",
            "POP",
            "prefix",
            "low rate: selected → reverted",
            "trial effect when decided",
            "reason",
        ]
        tables.append(table(header, rows))
        if data.reverted_total > len(rows):
            notes.append(
                f"The newest {len(rows)} of {data.reverted_total} reverts in the window; "
                f"{data.reverted_total - len(rows)} older ones are not shown."
            )
        notes.append(
            "Low rate: the prefix's p10 delivery rate when it was selected and at the revert, as the "
            "controller measured them in its window (descriptive, not an effect). Trial effect: the p10 "
            "delivery-rate effect and interval the deciding round judged; 'no trial' for a revert that ended "
            "no trial (no traffic for the expiry time, a denied prefix, over the cap)."
        )
    return Section(
        "reverted",
        "Prefixes reverted to CUBIC",
        "Prefixes the controller moved back from BBR in the window, newest first, with the decision's "
        "reason: their trial's BBR blocks did worse than its CUBIC blocks (the interval lies below 0), "
        "or they had no traffic for the expiry time, or config validation refuses them (denied), or the POP "
        "was over its --max-bbr-per-pop cap (over cap: the weakest evidence leaves first).",
        None,
        "No prefix was reverted in the report window.",
        tables=tables,
        notes=notes,
        table_only=True,
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
    tables, notes = [], []
    if w is not None and not data.cc_split.empty:
        rows = [
            [
                r["pop"],
                r["cc"] or "–",
                "> 100 KB" if r["size_class"] == "above" else "≤ 100 KB",
                f"{int(r['samples']):,}",
                f"{int(r['prefixes']):,}",
                *(_fmt_rate(float(r[c])) for c in ("p10", "p50", "p90")),
            ]
            for _, r in data.cc_split.iterrows()
        ]
        header = ["POP", "congestion control", "flow size", "samples", "prefixes", "p10", "p50", "p90"]
        tables.append("<h3>Treated prefixes: delivery rate by congestion control</h3>" + table(header, rows))
        notes.append(
            "Socket polls of treated prefixes after they entered their group, by the congestion control "
            "the collector read and by bytes acknowledged so far. With `dyncc agent --enforce bpf` "
            "connections start on cubic and switch to bbr past the config's threshold (100 KB by default): "
            "cubic rows above 100 KB are polls taken before the switch or flows the program did not switch; "
            "with route enforcement a treated prefix's connections run bbr except in its trial's CUBIC "
            "blocks and after a revert."
        )
    return Section(
        "bbrshare",
        "Share of sockets on BBR",
        "Share of observed sockets whose congestion control is a BBR variant: it rises when a "
        "config version reaches the edges and new connections from selected prefixes use BBR.",
        svg,
        "No raw socket samples (tcpinfo) in the report window.",
        tables=tables,
        notes=notes,
    )


def _cards(data: report_data.ReportData, pools: list[report_trials.Pool]) -> list[Card]:
    cards = [Card("POPs", ", ".join(data.pops) or "–")]
    q = int(data.delivery["qualifying"].sum()) if not data.delivery.empty else 0
    cards.append(Card("socket samples > 100 KB", f"{q:,}"))
    if not data.selections.empty:
        last = data.selections.sort_values("time").groupby("pop").tail(1)
        cards.append(Card("prefixes on BBR (last round)", f"{int(last['on_bbr'].sum()):,}"))
    cards.append(Card("config versions published", str(len(data.configs))))
    td = data.trials
    if td is None:
        return cards
    level = int(td.cfg.level * 100)  # as summary_line words it
    order = list(report_trials.METRICS)  # as the headline: delivery in force, all trials, then goodput
    for pool in sorted(pools, key=lambda p: order.index(p.metric)):
        if pool.scope != report_trials.ALL:
            continue
        e = pool.effect
        which = "prefixes in force" if pool.which == report_trials.IN_FORCE else "all trials (unbiased)"
        cards.append(
            Card(
                f"BBR effect on {report_trials.METRICS[pool.metric]}, {which} ({level}% interval)",
                e.text() if e.ok else "n/a",
            )
        )
    cards.append(Card("prefixes in force / trials in the window", f"{len(td.in_force):,} / {len(td.trials):,}"))
    share = td.evidence.app_limited_share(td.trials)
    left = "app-limited samples included" if td.include_app_limited else "app-limited samples left out"
    cards.append(Card(left, f"{share:.0%}" if math.isfinite(share) else "–"))  # as the headline words it
    return cards


def build_page(data: report_data.ReportData, title: str, pop: str = "") -> tuple[str, list[Section]]:
    results = effects(data) if data.window is not None else {}
    pools = report_trials.pools(data.trials, data.pops) if data.trials is not None else []
    headline: list[str] = []
    headline_notes: list[str] = []
    if data.trials is not None:
        headline, headline_notes = report_trials.headline_lines(data.trials)
    sections = [
        _delivery_section(data),
        _selections_section(data),
        _effect_section(data, pools),
        _trials_section(data),
        _reverted_section(data),
        _treated_section(data),
        _did_section(data, results),
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
    page = report_html.render_page(title, subtitle, _cards(data, pools), sections, footer, headline, headline_notes)
    return page, sections


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
