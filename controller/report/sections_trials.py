"""The report's sections of the one effect model (controller/evidence via trials.py): the pooled
effect of BBR, the per-prefix trials, the prefixes reverted to CUBIC.

Each takes the loaded ReportData (and the pooled figures) and returns an html.Section.
"""

from __future__ import annotations

import math

from controller.evidence.model import pct
from controller.evidence.settings import EvidenceSettings
from controller.report import data as report_data
from controller.report import plots as report_plots
from controller.report import trials as report_trials
from controller.report.cells import fmt_rate
from controller.report.html import Section, table


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


def effect_section(data: report_data.ReportData, pools: list[report_trials.Pool]) -> Section:
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


def trials_section(data: report_data.ReportData) -> Section:
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


def reverted_section(data: report_data.ReportData) -> Section:
    rev = data.reverted
    tables, notes = [], []
    if data.window is not None and not rev.empty:
        rows = []
        for r in rev.itertuples(index=False):
            base, low = float(r.selected_low_rate), float(r.low_delivery_rate)  # type: ignore[arg-type]
            rates = f"{fmt_rate(base)} → {fmt_rate(low)}" if base > 0 and low > 0 else "–"
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
