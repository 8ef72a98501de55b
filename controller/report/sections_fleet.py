"""The report's population sections over time, one function per section: delivery rate,
selections (and pins), treated versus holdout, per ISP, goodput, share on BBR.

Each takes the loaded ReportData and returns an html.Section (a plot, tables, notes); a section
without data carries its no-data sentence instead (never raises for lack of data).
"""

from __future__ import annotations

from controller.report import data as report_data
from controller.report import plots as report_plots
from controller.report.cells import change_text, fmt_rate, resolution
from controller.report.html import Section, table


def delivery_section(data: report_data.ReportData) -> Section:
    w = data.window
    svg = report_plots.delivery_rate_svg(data.delivery, data.configs, w) if w else None
    notes = []
    if svg is not None and data.configs.empty:
        notes.append("No published config version in the window (nothing to mark).")
    return Section(
        "delivery",
        "Delivery rate per POP",
        "Low percentiles (p5, p10) and the median (p50, dashed) of TCP_INFO delivery rate for "
        f"flows larger than 100 KB, per {resolution(data)}. Dashed vertical lines are published config "
        "versions: when BBR reaches the worst prefixes, p5/p10 should step up.",
        svg,
        "No telemetry (tcpinfo_5m) for the report window.",
        notes=notes,
    )


def selections_section(data: report_data.ReportData) -> Section:
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


def treated_section(data: report_data.ReportData) -> Section:
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
            change = change_text(b, a)
            rows.append([grp, n, fmt_rate(b) if b else "–", fmt_rate(a) if a else "–", change])
            cls = ""
            if b > 0 and a > 0 and abs(a / b - 1) >= 0.02:  # colour only real changes
                cls = "good" if a > b else "bad"
            classes.append(["", "", "", "", cls])
        tables.append(table(["group", "prefixes", "p10 before", "p10 after", "change"], rows, classes))
        if data.groups.empty or not (data.groups["grp"] == "holdout").any():
            notes.append("No holdout prefixes yet: the control group is a fraction of candidates.")
        notes.append(
            "Before/after is split at each prefix's first round in its group; values are "
            f"the median over {resolution(data)} buckets of the p10 delivery rate."
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


def isp_section(data: report_data.ReportData) -> Section:
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


def goodput_section(data: report_data.ReportData) -> Section:
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
            f"{resolution(data)}. Approximate: busy time leaves out the time the client waited between "
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
        f"POP per {resolution(data)}; below, the p10 of treated versus holdout prefixes.",
        svg,
        "Access-log rows exist in the window, but no response qualifies (status 200, > 1 MiB, request_time > 0).",
        notes=notes,
    )


def bbr_share_section(data: report_data.ReportData) -> Section:
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
                *(fmt_rate(float(r[c])) for c in ("p10", "p50", "p90")),
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
