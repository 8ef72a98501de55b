"""The report's population check: the treated-versus-holdout difference in differences.

`effects(data)` computes the DiD per metric per POP (controller/report/effects.py, pure);
`did_section` renders it as an html.Section with its table, plot and notes.  A secondary check
only: the effect of BBR is the trials' figure (sections_trials).
"""

from __future__ import annotations

from controller.report import data as report_data
from controller.report import effects as report_effects
from controller.report import html as report_html
from controller.report import plots as report_plots
from controller.report.cells import signed_pct
from controller.report.html import Section, table

#: the population check's metrics: key -> label (the key names the effects.py input in ReportData)
METRICS = {"delivery": "p10 delivery rate", "goodput": "p10 goodput"}


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
        interval = f"{signed_pct(d.ci_low)} … {signed_pct(d.ci_high)}"
    cells = [
        d.scope,
        signed_pct(d.estimate) if d.estimate is not None else "–",
        interval,
        signed_pct(t.change),
        signed_pct(h.change),
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


def did_section(data: report_data.ReportData, results: dict[str, list[report_effects.Did]]) -> Section:
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
