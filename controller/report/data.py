"""The report's data: run sql/queries/report_*.sql on a store and return DataFrames.

Every query returns times as Unix seconds (`ts`), converted here to UTC timestamps, so the
result does not depend on the server's time zone.  Also `render_view`, which expands Grafana's
`$__timeFilter(col)` macro the way the ClickHouse data source does, to run sql/views/*.sql.

Each report section is one query file.  The parts they share are files of their own spliced in
by `compose` (controller/store/sql.py splice): `{{source}}` (the per-bucket delivery-rate states,
from the 5-minute rollup or from raw tcpinfo in finer buckets) and `{{groups}}` (the treated /
holdout group of each prefix).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from controller.report.asn import AsnTable, map_prefixes
from controller.store import Store
from controller.store.sql import query, render_time_filter, splice

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_SPAN = dt.timedelta(hours=24)
BUCKET = dt.timedelta(minutes=5)
ISP_TOP = 8
ISP_MAX_PREFIXES = 4000  # keeps the per-ISP query text well under ClickHouse's max_query_size

_PART_NAME = re.compile(r"report_[a-z0-9_]+")
SOURCE_ROLLUP = "report_source_rollup"
SOURCE_RAW = "report_source_raw"
GROUPS = "report_treatment_groups"


@dataclass(frozen=True)
class Window:
    start: dt.datetime  # naive UTC, inclusive
    end: dt.datetime  # naive UTC, exclusive


@dataclass
class IspData:
    enabled: bool
    df: pd.DataFrame | None = None
    entries: int = 0
    malformed: int = 0
    dropped_prefixes: int = 0
    unmapped_prefixes: int = 0


@dataclass
class ReportData:
    window: Window | None
    pops: list[str]
    delivery: pd.DataFrame
    configs: pd.DataFrame
    selections: pd.DataFrame
    groups: pd.DataFrame
    treated: pd.DataFrame  # per (time, grp): the time series
    treated_split: pd.DataFrame  # per (time, grp, phase): before / after each prefix's t0
    goodput: pd.DataFrame
    bbr_share: pd.DataFrame
    isp: IspData = field(default_factory=lambda: IspData(enabled=False))
    bucket_seconds: int = 300


def auto_bucket(window: Window) -> int:
    """Bucket length for a window: the 5-minute rollup, or finer raw buckets for windows under 2 h.

    Short windows (an accelerated lab, a few minutes of data) get ~60 points, in whole 10 s.
    """
    seconds = (window.end - window.start).total_seconds()
    if seconds >= 2 * 3600:
        return 300
    return int(min(300, max(10, round(seconds / 60 / 10) * 10)))


def utc_naive(value: dt.datetime) -> dt.datetime:
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def default_window(
    span: tuple[dt.datetime, dt.datetime] | None, since: dt.datetime | None, until: dt.datetime | None
) -> Window | None:
    """The report window.  `span` is (first, last) 5-minute bucket of the data present, or None.

    Explicit bounds win; the default end is the end of the last bucket, the default start 24 h
    before the end but not before the first bucket (no empty plot area before the data).
    """
    if until is None:
        if span is None:
            return None if since is None else Window(utc_naive(since), utc_naive(since) + DEFAULT_SPAN)
        until = span[1] + BUCKET
    end = utc_naive(until)
    if since is not None:
        return Window(utc_naive(since), end)
    start = end - DEFAULT_SPAN
    if span is not None and start < span[0] < end:
        start = span[0]
    return Window(start, end)


def render_view(sql: str, start: dt.datetime, end: dt.datetime) -> str:
    """Expand `$__timeFilter(col)` to `col >= toDateTime(S) AND col <= toDateTime(E)` (Unix s)."""
    s = int(utc_naive(start).replace(tzinfo=dt.UTC).timestamp())
    e = int(utc_naive(end).replace(tzinfo=dt.UTC).timestamp())
    return render_time_filter(sql, s, e)


def compose(name: str, **slots: str) -> str:
    """Query file `name` with each `{{slot}}` replaced by the text of the query file slots[slot].

    Only names of sql/queries/report_*.sql files are accepted for the parts, so nothing but
    dyncc's own SQL is spliced; %(param)s placeholders are left for the store to render.
    """
    for part in slots.values():
        if not _PART_NAME.fullmatch(part):
            raise ValueError(f"not a report query file name: {part!r}")
    return splice(query(name), {slot: query(part) for slot, part in slots.items()})


def source_for(bucket: int) -> str:
    """The per-bucket source for a bucket length: the 5-minute rollup, or raw tcpinfo."""
    return SOURCE_ROLLUP if bucket == int(BUCKET.total_seconds()) else SOURCE_RAW


def view_text(name: str) -> str:
    return query(f"views/{name}")


def _with_time(df: pd.DataFrame, column: str = "ts", into: str = "time") -> pd.DataFrame:
    import pandas as pd

    df = df.copy()
    df[into] = (
        pd.to_datetime(df[column].astype("int64"), unit="s") if len(df) else pd.Series([], dtype="datetime64[ns]")
    )
    for col in df.columns:
        if df[col].dtype == object or str(df[col].dtype).startswith("string"):
            df[col] = df[col].astype(str)
    return df


def _q(store: Store, name: str, params: dict[str, Any], time_col: str = "ts", **slots: str) -> pd.DataFrame:
    df = store.query_df(compose(name, **slots), params)
    return _with_time(df, time_col) if time_col in df.columns else df


def data_span(store: Store, pop: str) -> tuple[dt.datetime, dt.datetime] | None:
    """(first, last) 5-minute bucket of telemetry present for the POP ('' = all), None if none."""
    rows = store.query_rows(query("report_time_range"), {"pop": pop})
    if not rows or int(rows[0][0]) == 0:
        return None

    def utc(ts: Any) -> dt.datetime:
        return dt.datetime.fromtimestamp(int(ts), dt.UTC).replace(tzinfo=None)

    return utc(rows[0][1]), utc(rows[0][2])


def load(
    store: Store,
    pop: str = "",
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    asn_table: AsnTable | None = None,
    bucket_seconds: int | None = None,
) -> ReportData:
    """Run every report query for the window (see default_window) and the POP filter ('' = all).

    `bucket_seconds`: time resolution; None picks one (auto_bucket).  300 reads the 5-minute
    rollup; anything else reads the raw tcpinfo table (report_source_raw.sql).
    """
    import pandas as pd

    window = default_window(data_span(store, pop), since, until)
    if window is None:  # no telemetry at all: every section is empty, the page says so
        empty = pd.DataFrame()
        return ReportData(
            None, [], empty, empty, empty, empty, empty, empty, empty, empty, IspData(enabled=asn_table is not None)
        )
    bucket = int(bucket_seconds or auto_bucket(window))
    source = source_for(bucket)
    params: dict[str, Any] = {"pop": pop, "start": window.start, "end": window.end, "bucket": bucket}
    delivery = _q(store, "report_delivery_by_pop", params, source=source)
    configs = _q(store, "report_config_versions", params)
    selections = _q(store, "report_selections_per_round", params)
    groups = _q(store, GROUPS, {"pop": pop, "end": window.end}, time_col="t0_ts")
    treated = _q(store, "report_treated_vs_holdout", {**params, "split": 0}, source=source, groups=GROUPS)
    treated = treated.drop(columns=["phase"], errors="ignore")
    treated_split = _q(store, "report_treated_vs_holdout", {**params, "split": 1}, source=source, groups=GROUPS)
    goodput = _q(store, "report_goodput", params)
    bbr_share = _q(store, "report_bbr_share", params)
    pops = sorted(set(delivery.get("pop", pd.Series(dtype=str))) | set(selections.get("pop", [])))
    data = ReportData(
        window,
        pops,
        delivery,
        configs,
        selections,
        groups,
        treated,
        treated_split,
        goodput,
        bbr_share,
        bucket_seconds=bucket,
    )
    if asn_table is not None:
        data.isp = load_isp(store, params, asn_table, source)
    return data


def load_isp(store: Store, params: dict[str, Any], table: AsnTable, source: str = SOURCE_ROLLUP) -> IspData:
    seen = store.query_rows(query("report_prefixes"), params)
    weighted = [(str(p), int(n)) for p, n in seen]
    prefixes, labels, dropped = map_prefixes(table, weighted, ISP_TOP, ISP_MAX_PREFIXES)
    mapped_all = sum(1 for p, _ in weighted if table.lookup(p) is not None)
    isp = IspData(True, None, table.entries, table.malformed, dropped, len(weighted) - mapped_all)
    if prefixes:
        isp_params = {**params, "prefixes": prefixes, "isps": labels}
        df = store.query_df(compose("report_isp_low_percentiles", source=source), isp_params)
        isp.df = _with_time(df)
    return isp


def before_after(split: pd.DataFrame) -> pd.DataFrame:
    """Per group and phase: the median over 5-minute buckets of the bucket's p10 (and count).

    Columns: grp, phase, p10, buckets; empty when `split` is.  Pure.
    """
    import pandas as pd

    if split is None or split.empty:
        return pd.DataFrame({"grp": [], "phase": [], "p10": [], "buckets": []})
    out = split.groupby(["grp", "phase"], as_index=False).agg(p10=("p10", "median"), buckets=("p10", "size"))
    return out.sort_values(["grp", "phase"]).reset_index(drop=True)
