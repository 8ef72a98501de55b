"""Pure parts of `dyncc report`: ASN mapping, window, Grafana macro, summary, plots, page."""

from __future__ import annotations

import datetime as dt
import re

import pandas as pd
import pytest

from controller.report import html as report_html
from controller.report import plots as report_plots
from controller.report.asn import map_prefixes, parse_asn_rows
from controller.report.cli import resolve_window
from controller.report.data import Window, before_after, default_window, render_view
from dyncc_common.errors import ConfigError
from tests.support.svg import path_points

T = dt.datetime(2024, 5, 1, 10, 0)


def test_asn_longest_prefix_match_and_malformed_lines():
    table = parse_asn_rows(
        [
            ["prefix", "asn", "name"],
            ["198.51.0.0/16", "64501", "Wide"],
            ["198.51.100.0/22", "AS64500", "Narrow"],
            ["2001:db8::/32", "64510"],
            ["not-a-prefix", "1"],
            ["203.0.113.0/24", "x1"],
            ["10.0.0.0/8"],
            ["# comment"],
            [],
        ]
    )
    assert table.entries == 3
    assert table.malformed == 3
    assert table.lookup("198.51.101.0/24") == "AS64500 Narrow"
    assert table.lookup("198.51.7.0/24") == "AS64501 Wide"
    assert table.lookup("2001:db8:0:100::/56") == "AS64510"
    assert table.lookup("::ffff:198.51.100.0/120") == "AS64500 Narrow"
    assert table.lookup("192.0.2.0/24") is None
    assert table.lookup("garbage") is None


def test_asn_file_forms_the_docs_name():
    """docs/report.md: `AS` optional (also `AS 64496`), a name optional, whitespace-separated
    lines, a header and comments; host bits set in a network are accepted."""
    table = parse_asn_rows(
        [
            ["# lab ISPs"],
            ["prefix", "asn", "name"],
            ["2001:db8:100::/40", "64496", "Example Cable"],
            ["2001:db8:200::1/48", "AS 64497", "Example Mobile"],
            ["198.51.100.0/24", "as64498"],
            ["203.0.113.0/24 64499 Example Fibre"],
            ["2001:db8:300::/48 AS64500"],
            ["2001:db8:400::/48 notanasn"],
        ]
    )
    assert (table.entries, table.malformed) == (5, 1)
    assert table.lookup("2001:db8:101:300::/56") == "AS64496 Example Cable"
    assert table.lookup("2001:db8:200:ff00::/56") == "AS64497 Example Mobile"
    assert table.lookup("198.51.100.0/24") == "AS64498"
    assert table.lookup("203.0.113.0/24") == "AS64499 Example Fibre"
    assert table.lookup("2001:db8:300:100::/56") == "AS64500"


def test_table_only_section_has_data_only_with_a_table():
    empty = report_html.Section("r", "Reverted", "lead", None, "No revert.", table_only=True)
    assert not empty.has_data and 'data-nodata="r"' in report_html.render_section(empty)
    full = report_html.Section("r", "Reverted", "lead", None, tables=[report_html.table(["a"], [[1]])], table_only=True)
    assert full.has_data and "data-nodata" not in report_html.render_section(full)
    figure_less = report_html.Section("e", "Effect", "lead", None, "No estimate.", tables=["<table></table>"])
    assert not figure_less.has_data and 'data-nodata="e"' in report_html.render_section(figure_less)


def test_map_prefixes_keeps_top_isps_and_caps():
    table = parse_asn_rows([["198.51.0.0/16", "1", "A"], ["198.52.0.0/16", "2", "B"], ["198.53.0.0/16", "3", "C"]])
    seen = [
        ("198.51.1.0/24", 100),
        ("198.51.2.0/24", 50),
        ("198.52.1.0/24", 120),
        ("198.53.1.0/24", 5),
        ("192.0.2.0/24", 999),
    ]
    prefixes, labels, dropped = map_prefixes(table, seen, top=2, max_prefixes=10)
    assert set(labels) == {"AS1 A", "AS2 B"}
    assert prefixes[0] == "198.52.1.0/24" and dropped == 1
    prefixes, _, dropped = map_prefixes(table, seen, top=2, max_prefixes=2)
    assert prefixes == ["198.52.1.0/24", "198.51.1.0/24"] and dropped == 2


def test_default_window():
    first, last = T, T + dt.timedelta(hours=3)
    w = default_window((first, last), None, None)
    assert w == Window(first, last + dt.timedelta(minutes=5))  # clipped to the data
    w = default_window((T - dt.timedelta(days=3), last), None, None)
    assert w is not None and w.end - w.start == dt.timedelta(hours=24)
    assert default_window(None, None, None) is None
    until = T + dt.timedelta(hours=1)
    assert default_window((first, last), T - dt.timedelta(hours=2), until) == Window(T - dt.timedelta(hours=2), until)
    aware = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    w = default_window(None, None, aware)
    assert w is not None and w.end == T


def test_render_view_expands_time_filter():
    sql = "SELECT 1 FROM t WHERE $__timeFilter(time) AND $__timeFilter( created_at )"
    out = render_view(sql, T, T + dt.timedelta(hours=1))
    s = int(T.replace(tzinfo=dt.UTC).timestamp())
    assert f"time >= toDateTime({s}) AND time <= toDateTime({s + 3600})" in out
    assert f"created_at >= toDateTime({s})" in out and "$__" not in out


def test_cli_window_flags():
    assert resolve_window(None, None) == (None, None, None)
    assert resolve_window("6h", None) == (None, None, 6 * 3600)
    since, until, span = resolve_window("2024-05-01T08:00Z", "2024-05-01T10:00")
    assert (since, until, span) == (dt.datetime(2024, 5, 1, 8), T, None)
    with pytest.raises(ConfigError):
        resolve_window("yesterday", None)
    with pytest.raises(ConfigError):
        resolve_window("2024-05-01T11:00", "2024-05-01T10:00")


def test_before_after_median_of_bucket_p10():
    split = pd.DataFrame(
        {
            "grp": ["treated"] * 4 + ["holdout"] * 2,
            "phase": ["before", "before", "after", "after", "before", "after"],
            "p10": [1.0, 3.0, 10.0, 12.0, 5.0, 5.5],
        }
    )
    out = before_after(split).set_index(["grp", "phase"])
    assert out.loc[("treated", "before"), "p10"] == 2.0
    assert out.loc[("treated", "after"), "p10"] == 11.0
    assert out.loc[("holdout", "after"), "buckets"] == 1
    assert before_after(pd.DataFrame()).empty


def _series(n: int, gap_at: int | None = None) -> pd.DataFrame:
    """n buckets per POP; with gap_at, three buckets are missing there."""
    times = [T + dt.timedelta(minutes=5 * i) for i in range(n + (3 if gap_at is not None else 0))]
    if gap_at is not None:
        del times[gap_at : gap_at + 3]
    rows = []
    for pop in ("lax", "ord"):
        for t in times:
            rows.append({"time": pd.Timestamp(t), "pop": pop, "qualifying": 10, "p5": 1e6, "p10": 1.2e6, "p50": 5e6})
    return pd.DataFrame(rows)


def test_delivery_plot_draws_one_vertex_per_bucket_and_breaks_gaps():
    window = Window(T, T + dt.timedelta(hours=2))
    configs = pd.DataFrame(
        {
            "pop": ["lax"],
            "version": [3],
            "time": [pd.Timestamp(T + dt.timedelta(hours=1))],
            "entries": [5],
            "kill_switch": [0],
        }
    )
    svg = report_plots.delivery_rate_svg(_series(20), configs, window)
    assert svg is not None and svg.startswith("<svg")
    for pop in ("lax", "ord"):
        for pct in ("p5", "p10", "p50"):
            assert path_points(svg, f"delivery-{pop}-{pct}") == 20
    assert ">v3<" in svg
    gapped = report_plots.delivery_rate_svg(_series(20, gap_at=10), configs, window)
    assert gapped is not None
    m = re.search(r'<g id="delivery-lax-p10">\s*<path d="([^"]*)"', gapped)
    assert m and m.group(1).count("M") == 2  # the line breaks at the missing bucket
    assert report_plots.delivery_rate_svg(pd.DataFrame(), configs, window) is None


def test_page_escapes_text_and_marks_empty_sections():
    sections = [
        report_html.Section("a", "Plot <A>", "lead & more", '<svg class="plot"></svg>'),
        report_html.Section("b", "Empty", "nothing", None, "No data <here>."),
    ]
    page = report_html.render_page("T <x>", "sub", [report_html.Card("k", "v&")], sections, "f")
    assert "<title>T &lt;x&gt;</title>" in page and "Plot &lt;A&gt;" in page and "v&amp;" in page
    assert 'data-nodata="b"' in page and "No data &lt;here&gt;." in page
    assert 'data-nodata="a"' not in page


def test_auto_bucket():
    from controller.report.data import auto_bucket

    assert auto_bucket(Window(T, T + dt.timedelta(hours=24))) == 300
    assert auto_bucket(Window(T, T + dt.timedelta(minutes=5))) == 10
    assert auto_bucket(Window(T, T + dt.timedelta(minutes=20))) == 20
    assert auto_bucket(Window(T, T + dt.timedelta(minutes=119))) == 120


def test_compose_splices_only_report_query_files():
    from controller.report.data import GROUPS, SOURCE_RAW, SOURCE_ROLLUP, compose, source_for

    assert source_for(300) == SOURCE_ROLLUP and source_for(30) == SOURCE_RAW and source_for(600) == SOURCE_RAW
    for source in (SOURCE_ROLLUP, SOURCE_RAW):
        for name, slots in (
            ("report_delivery_by_pop", {"source": source}),
            ("report_isp_low_percentiles", {"source": source}),
            ("report_treated_vs_holdout", {"source": source, "groups": GROUPS}),
        ):
            sql = compose(name, **slots)
            assert "{" not in sql and "--" not in sql, name
            assert ("FROM tcpinfo_5m" in sql) == (source == SOURCE_ROLLUP), name
            assert ("%(bucket)s" in sql) == (source == SOURCE_RAW), name
    assert "FROM selections" in compose("report_treated_vs_holdout", source=SOURCE_RAW, groups=GROUPS)
    from controller.report.data import REQUESTS, REVERTED

    for name, slots in (
        ("report_effect_delivery", {"source": SOURCE_ROLLUP, "groups": GROUPS}),
        ("report_goodput_http", {"requests": REQUESTS}),
        ("report_goodput_groups", {"requests": REQUESTS, "groups": GROUPS}),
        ("report_effect_goodput", {"requests": REQUESTS, "groups": GROUPS}),
        ("report_reverted", {"reverted": REVERTED}),
        ("report_reverted_count", {"reverted": REVERTED}),
    ):
        sql = compose(name, **slots)
        assert "{" not in sql and "--" not in sql, name
        assert ("FROM http_requests" in sql) == ("requests" in slots), name
    for bad in ("SELECT 1", "../views/treated_vs_holdout", "scoring_refresh_raw", "report_source_raw; DROP"):
        with pytest.raises(ValueError, match="not a report query file"):
            compose("report_delivery_by_pop", source=bad)
    with pytest.raises(ValueError, match="slots"):
        compose("report_delivery_by_pop", source=SOURCE_RAW, groups=GROUPS)


def _title_legend_overlaps(monkeypatch: pytest.MonkeyPatch, draw) -> list[str]:
    """Draw with `draw()` and return, per axes whose legend overlaps its title, the title text."""
    from matplotlib.text import Text

    found: list[str] = []

    def check(fig) -> str:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is None:
                continue
            box = legend.get_window_extent(renderer)
            titles = [ax.get_title(loc=loc) for loc in ("left", "center", "right")]
            for child in ax.get_children():
                is_title = isinstance(child, Text) and child.get_text() and child.get_text() in titles
                if is_title and child.get_window_extent(renderer).overlaps(box):
                    found.append(child.get_text())
        return "<svg></svg>"

    monkeypatch.setattr(report_plots, "_svg", check)
    assert draw() is not None
    return found


def test_plot_titles_and_legends_do_not_overlap(monkeypatch):
    """Issue 24: the per-ISP chart's title was drawn over its legend (8 ISPs with long names)."""
    window = Window(T, T + dt.timedelta(hours=2))
    times = [pd.Timestamp(T + dt.timedelta(minutes=5 * k)) for k in range(24)]
    isps = [f"AS{64496 + k} Example Broadband Provider {k}" for k in range(8)]
    isp = pd.DataFrame(
        [
            {"isp": name, "time": t, "qualifying": 100 - k, "p5": 1e6, "p10": 1.2e6 + k}
            for k, name in enumerate(isps)
            for t in times
        ]
    )
    configs = pd.DataFrame({"pop": [], "version": [], "time": [], "entries": [], "kill_switch": []})
    assert _title_legend_overlaps(monkeypatch, lambda: report_plots.isp_svg(isp, configs, window)) == []
    series = _series(24)
    goodput = series.rename(columns={"qualifying": "requests"})
    assert _title_legend_overlaps(monkeypatch, lambda: report_plots.delivery_rate_svg(series, configs, window)) == []
    draw_goodput = lambda: report_plots.goodput_svg(goodput, None, configs, window, "Goodput per POP")  # noqa: E731
    assert _title_legend_overlaps(monkeypatch, draw_goodput) == []
