"""The report's plots: pure functions from DataFrames to inline SVG text (matplotlib, Agg).

Each function returns None when it has nothing to draw.  Every data line or bar carries an SVG
id (`<section>-<series>`), so tests and people can find the drawn data in the page.  Rates are
drawn in Mbit/s on a log axis (low percentiles and medians differ by an order of magnitude);
config versions are dashed vertical lines labelled vN.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from controller.report.data import BUCKET, Window

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

WIDTH_IN = 11.0
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"]
GROUP_COLORS = {"treated": "#2ca02c", "holdout": "#7f7f7f"}
PCT_STYLE = {  # percentile -> (line width, alpha, dashes)
    "p5": (1.2, 0.55, (None)),
    "p10": (2.2, 1.0, (None)),
    "p50": (1.2, 0.8, (4, 2)),
}


def mbps(bytes_per_s: Any) -> Any:
    return bytes_per_s * 8 / 1e6


def pop_colors(pops: list[str]) -> dict[str, str]:
    return {pop: PALETTE[i % len(PALETTE)] for i, pop in enumerate(sorted(pops))}


@contextmanager
def _figure(salt: str, rows: int, row_height: float, **kw: Any) -> Iterator[tuple[Figure, Any]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rc: dict[Any, Any] = {
        "svg.hashsalt": salt,  # distinct clip-path ids per plot: they share one page
        "svg.fonttype": "none",  # text stays text (small, selectable)
        "path.simplify": False,  # every data point is drawn
        "font.family": "DejaVu Sans",
        "font.size": 10,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.color": "#e5e5e5",
        "grid.linewidth": 0.8,
        "axes.edgecolor": "#888888",
        "axes.titlesize": 11,
        "axes.titleweight": "bold",
        "axes.titlelocation": "left",
        "legend.frameon": False,
        "legend.fontsize": 9,
    }
    with plt.rc_context(rc):
        fig, axes = plt.subplots(rows, squeeze=False, figsize=(WIDTH_IN, row_height * rows), **kw)
        try:
            yield fig, axes
        finally:
            plt.close(fig)


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    # responsive: drop the fixed size, keep the viewBox
    return re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r'<svg\1 class="plot"', text, count=1)


def _time_axis(ax: Axes, window: Window) -> None:
    import matplotlib.dates as mdates

    locator = mdates.AutoDateLocator(minticks=4, maxticks=10)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, show_offset=True))
    ax.set_xlim(window.start, window.end)  # type: ignore[arg-type]


def _rate_axis(ax: Axes, label: str = "Mbit/s") -> None:
    from matplotlib import ticker

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_ylabel(label)


def _gapped(times: pd.Series, values: pd.Series) -> tuple[list[Any], list[float]]:
    """Insert a NaN (a break in the line) where samples are missing for a while.

    "A while" is more than 2.5 typical steps (the median spacing of the samples), so sparse but
    regular polls stay one line and a real outage shows as a gap.
    """
    import pandas as pd

    steps = pd.Series(times).diff().dropna()
    steps = steps[steps > pd.Timedelta(0)]
    step = steps.median() if len(steps) else pd.Timedelta(BUCKET)
    xs: list[Any] = []
    ys: list[float] = []
    prev = None
    for t, v in zip(times, values, strict=True):
        if prev is not None and (t - prev) > step * 2.5:
            xs.append(prev + step)
            ys.append(float("nan"))
        xs.append(t)
        ys.append(float(v))
        prev = t
    return xs, ys


def _plot(ax: Axes, xs: list[Any], ys: list[float], gid: str, **kw: Any) -> Any:
    """ax.plot with the series id; few points get markers (a lone point is no line)."""
    if sum(1 for y in ys if y == y) <= 3:
        kw.setdefault("marker", "o")
        kw.setdefault("markersize", 4)
    (line,) = ax.plot(xs, ys, **kw)
    line.set_gid(gid)
    return line


def _mark_configs(ax: Axes, configs: pd.DataFrame, pop: str | None, window: Window) -> None:
    """Dashed vertical line per config version (of `pop`, or every POP when None), labelled.

    Versions at the same time share one label ("lax v1 · ord v1"); labels of nearby lines step
    down so they do not overlap.
    """
    if configs is None or configs.empty:
        return
    rows = configs if pop is None else configs[configs["pop"] == pop]
    labels: dict[Any, list[str]] = {}
    kills: set[Any] = set()
    for _, row in rows.sort_values("time").iterrows():
        kill = bool(int(row["kill_switch"]))
        text = f"v{int(row['version'])}" + (" kill switch" if kill else "")
        labels.setdefault(row["time"], []).append(text if pop is not None else f"{row['pop']} {text}")
        if kill:
            kills.add(row["time"])
    span = (window.end - window.start).total_seconds() or 1.0
    last_x: Any = None
    level = 0
    for t, texts in labels.items():
        color = "#d62728" if t in kills else "#555555"
        ax.axvline(t, color=color, linestyle=(0, (4, 3)), linewidth=1.0, alpha=0.8, zorder=1)
        near = last_x is not None and (t - last_x).total_seconds() / span < 0.12
        level = (level + 1) % 3 if near else 0
        last_x = t
        ax.annotate(
            " · ".join(texts),
            xy=(t, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -2 - 11 * level),
            textcoords="offset points",
            va="top",
            fontsize=8,
            color=color,
            bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
        )


def _legend(ax: Axes, ncol: int) -> None:
    """Legend above the plot, right-aligned (the title is left-aligned on the same line)."""
    ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=max(1, ncol), borderaxespad=0.2)


def _legend_right(ax: Axes) -> None:
    """Legend outside the plot, to its right, one entry per line: for many or long entries (ISP
    names), which above the plot would run into the title."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=1, borderaxespad=0.0)


def delivery_rate_svg(delivery: pd.DataFrame, configs: pd.DataFrame, window: Window) -> str | None:
    """One panel per POP: p5 / p10 / p50 delivery rate over time, config versions marked."""
    if delivery is None or delivery.empty:
        return None
    pops = sorted(delivery["pop"].unique())
    colors = pop_colors(pops)
    with _figure("delivery", len(pops), 2.8, sharex=True) as (fig, axes):
        for ax, pop in zip(axes[:, 0], pops, strict=True):
            d = delivery[delivery["pop"] == pop].sort_values("time")
            for pct, (width, alpha, dashes) in PCT_STYLE.items():
                xs, ys = _gapped(d["time"], mbps(d[pct]))
                line = _plot(
                    ax, xs, ys, f"delivery-{pop}-{pct}", color=colors[pop], linewidth=width, alpha=alpha, label=pct
                )
                if dashes:
                    line.set_dashes(dashes)
            _mark_configs(ax, configs, pop, window)
            _rate_axis(ax)
            ax.set_title(f"POP {pop}: delivery rate of flows > 100 KB")
            _legend(ax, 3)
            _time_axis(ax, window)
        fig.tight_layout()
        return _svg(fig)


def selections_svg(selections: pd.DataFrame, window: Window) -> str | None:
    """Bars: prefixes newly selected for BBR per round, one colour per POP (side by side)."""
    if selections is None or selections.empty:
        return None
    import numpy as np

    pops = sorted(selections["pop"].unique())
    colors = pop_colors(pops)
    times = np.sort(selections["time"].unique())
    step = np.min(np.diff(times)) if len(times) > 1 else np.timedelta64(300, "s")
    width = step / max(1, len(pops)) * 0.8
    with _figure("selections", 1, 3.2) as (fig, axes):
        ax = axes[0, 0]
        for k, pop in enumerate(pops):
            d = selections[selections["pop"] == pop].sort_values("time")
            offset = (k - (len(pops) - 1) / 2) * width
            bars = ax.bar(
                d["time"] + offset,
                d["new_selected"],
                width=width,
                color=colors[pop],
                label=f"{pop} (on BBR now: {int(d['on_bbr'].iloc[-1])})",
            )
            for i, bar in enumerate(bars):
                bar.set_gid(f"selections-{pop}-{i}")
        ax.set_ylabel("new prefixes")
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.set_title("New prefixes selected for BBR per round")
        _legend(ax, len(pops))
        _time_axis(ax, window)
        fig.tight_layout()
        return _svg(fig)


def treated_vs_holdout_svg(
    treated: pd.DataFrame, summary: pd.DataFrame, configs: pd.DataFrame, window: Window
) -> str | None:
    """Left: p10 over time per group; right: before/after bars (median of the 5-minute p10s)."""
    if treated is None or treated.empty:
        return None
    import numpy as np

    with _figure("treated", 1, 3.4, ncols=2, gridspec_kw={"width_ratios": [3, 1]}) as (fig, axes):
        ax, bx = axes[0, 0], axes[0, 1]
        for grp in ("treated", "holdout"):
            d = treated[treated["grp"] == grp].groupby("time", as_index=False)["p10"].min()
            if d.empty:
                continue
            xs, ys = _gapped(d["time"], mbps(d["p10"]))
            line = _plot(ax, xs, ys, f"treated-{grp}-p10", color=GROUP_COLORS[grp], linewidth=2.0, label=f"{grp} p10")
            if grp == "holdout":
                line.set_dashes((5, 2))
        _mark_configs(ax, configs, None, window)
        _rate_axis(ax)
        ax.set_title("p10 delivery rate: treated (BBR) vs holdout (CUBIC)")
        _legend(ax, 2)
        _time_axis(ax, window)

        x = np.arange(2)
        for k, phase in enumerate(("before", "after")):
            vals = []
            for grp in ("treated", "holdout"):
                row = summary[(summary["grp"] == grp) & (summary["phase"] == phase)]
                vals.append(float(mbps(row["p10"].iloc[0])) if len(row) else 0.0)
            bars = bx.bar(
                x + (k - 0.5) * 0.38,
                vals,
                width=0.36,
                label=phase,
                color=["#b9dcb9", "#cccccc"] if phase == "before" else list(GROUP_COLORS.values()),
            )
            for i, bar in enumerate(bars):
                bar.set_gid(f"treated-bar-{('treated', 'holdout')[i]}-{phase}")
                if vals[i] > 0:
                    bx.annotate(
                        f"{vals[i]:.3g}",
                        (bar.get_x() + bar.get_width() / 2, vals[i]),
                        ha="center",
                        va="bottom",
                        fontsize=8,
                        xytext=(0, 2),
                        textcoords="offset points",
                    )
        bx.set_xticks(x, ["treated", "holdout"])
        bx.set_ylabel("Mbit/s")
        bx.set_title("p10 before (light) → after")
        bx.grid(axis="x", visible=False)
        fig.tight_layout()
        return _svg(fig)


def isp_svg(isp: pd.DataFrame, configs: pd.DataFrame, window: Window) -> str | None:
    """p10 (solid) and p5 (thin) delivery rate per ISP over time."""
    if isp is None or isp.empty:
        return None
    isps = list(isp.groupby("isp")["qualifying"].sum().sort_values(ascending=False).index)
    with _figure("isp", 1, 3.6) as (fig, axes):
        ax = axes[0, 0]
        for i, name in enumerate(isps):
            d = isp[isp["isp"] == name].sort_values("time")
            color = PALETTE[i % len(PALETTE)]
            for pct, width, alpha in (("p10", 2.0, 1.0), ("p5", 1.0, 0.5)):
                xs, ys = _gapped(d["time"], mbps(d[pct]))
                _plot(
                    ax,
                    xs,
                    ys,
                    f"isp-{i}-{pct}",
                    color=color,
                    linewidth=width,
                    alpha=alpha,
                    label=f"{name} {pct}" if pct == "p10" else None,
                )
        _mark_configs(ax, configs, None, window)
        _rate_axis(ax)
        ax.set_title("Per-ISP delivery rate (p10 bold, p5 thin)")
        _legend_right(ax)
        _time_axis(ax, window)
        fig.tight_layout()
        return _svg(fig)


def per_pop_lines_svg(
    df: pd.DataFrame,
    column: str,
    configs: pd.DataFrame,
    window: Window,
    section: str,
    title: str,
    ylabel: str,
    rate: bool = True,
) -> str | None:
    """One line per POP of `column` over time (goodput p10, BBR share)."""
    if df is None or df.empty:
        return None
    pops = sorted(df["pop"].unique())
    colors = pop_colors(pops)
    with _figure(section, 1, 3.2) as (fig, axes):
        ax = axes[0, 0]
        for pop in pops:
            d = df[df["pop"] == pop].sort_values("time")
            values = mbps(d[column]) if rate else d[column] * 100
            xs, ys = _gapped(d["time"], values)
            _plot(ax, xs, ys, f"{section}-{pop}", color=colors[pop], linewidth=2.0, label=pop)
        _mark_configs(ax, configs, None, window)
        if rate:
            _rate_axis(ax, ylabel)
        else:
            ax.set_ylim(0, 100)
            ax.set_ylabel(ylabel)
        ax.set_title(title)
        _legend(ax, len(pops))
        _time_axis(ax, window)
        fig.tight_layout()
        return _svg(fig)


def goodput_svg(
    per_pop: pd.DataFrame, groups: pd.DataFrame | None, configs: pd.DataFrame, window: Window, title: str
) -> str | None:
    """Top: p10 (solid) and p50 (dashed) goodput per POP; below, when `groups` has rows, the p10
    goodput of treated and holdout prefixes over time."""
    if per_pop is None or per_pop.empty:
        return None
    pops = sorted(per_pop["pop"].unique())
    colors = pop_colors(pops)
    has_groups = groups is not None and not groups.empty
    with _figure("goodput", 2 if has_groups else 1, 3.2, sharex=True) as (fig, axes):
        ax = axes[0, 0]
        for pop in pops:
            d = per_pop[per_pop["pop"] == pop].sort_values("time")
            for pct, (width, alpha, dashes) in PCT_STYLE.items():
                if pct not in d.columns:
                    continue
                xs, ys = _gapped(d["time"], mbps(d[pct]))
                label = f"{pop} {pct}"
                line = _plot(
                    ax, xs, ys, f"goodput-{pop}-{pct}", color=colors[pop], linewidth=width, alpha=alpha, label=label
                )
                if dashes:
                    line.set_dashes(dashes)
        _mark_configs(ax, configs, None, window)
        _rate_axis(ax)
        ax.set_title(title)
        _legend(ax, min(4, 2 * len(pops)))
        _time_axis(ax, window)
        if has_groups:
            assert groups is not None
            gx = axes[1, 0]
            for grp in ("treated", "holdout"):
                d = groups[groups["grp"] == grp].sort_values("time")
                if d.empty:
                    continue
                xs, ys = _gapped(d["time"], mbps(d["p10"]))
                line = _plot(
                    gx, xs, ys, f"goodput-{grp}-p10", color=GROUP_COLORS[grp], linewidth=2.0, label=f"{grp} p10"
                )
                if grp == "holdout":
                    line.set_dashes((5, 2))
            _mark_configs(gx, configs, None, window)
            _rate_axis(gx)
            gx.set_title("p10 goodput: treated (BBR) vs holdout (CUBIC)")
            _legend(gx, 2)
            _time_axis(gx, window)
        fig.tight_layout()
        return _svg(fig)


def effect_svg(
    rows: list[tuple[str, str, str, float, float, float]],
    section: str = "effect",
    title: str = "Effect of BBR",
    xlabel: str = "effect, % (dot: estimate, line: interval)",
) -> str | None:
    """Estimates with their intervals, one horizontal line per row, on the effect scale (+0.25 is
    drawn as +25 %).  A row is (id, label, metric, estimate, low, high); its interval line has the
    SVG id `<section>-<id>` (without an interval, nan bounds, the estimate's dot has it); one colour
    per metric."""
    if not rows:
        return None
    metrics = list(dict.fromkeys(r[2] for r in rows))
    with _figure(section, 1, 0.42 * len(rows) + 1.2) as (fig, axes):
        ax = axes[0, 0]
        ys = list(range(len(rows)))[::-1]
        for (gid, _, metric, est, lo, hi), y in zip(rows, ys, strict=True):
            color = PALETTE[metrics.index(metric) % len(PALETTE)]
            (dot,) = ax.plot([est * 100], [y], marker="o", color=color, markersize=6)
            if lo == lo and hi == hi:  # not nan
                (line,) = ax.plot([lo * 100, hi * 100], [y, y], color=color, linewidth=2.4, solid_capstyle="butt")
                line.set_gid(f"{section}-{gid}")
            else:
                dot.set_gid(f"{section}-{gid}")
        ax.axvline(0, color="#555555", linewidth=1.0)
        ax.set_yticks(ys, [r[1] for r in rows])
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.set_xlabel(xlabel)
        ax.set_title(title)
        ax.grid(axis="y", visible=False)
        fig.tight_layout()
        return _svg(fig)
