"""The report's data: run sql/queries/report_*.sql on a store and return DataFrames.

Every query returns times as Unix seconds (`ts`), converted here to UTC timestamps, so the
result does not depend on the server's time zone.  `render_view` expands Grafana's
`$__timeFilter(time)` in a query the way the ClickHouse data source does (for the views `dyncc
schema apply` creates from sql/views/*.sql).

Each report section is one query file.  The parts they share are files of their own spliced in
by `compose` (controller/store/sql.py splice): `{{source}}` (the per-bucket delivery-rate states,
from the 5-minute rollup or from raw tcpinfo in finer buckets), `{{groups}}` (the treated /
holdout group of each prefix), `{{requests}}` (the access-log requests that count for goodput)
and `{{reverted}}` (the revert decisions).  The operator's pins in force (store_pins.sql) are read
whatever the window: a pin holds until it is removed.

Goodput comes from http_requests (the access logs); only when that table has no row at all in
the window (or does not exist) does the report fall back to the busy_time approximation of
report_goodput.sql, and `ReportData.goodput_source` says which one it used.

The effect figures come from the one effect model (controller/evidence): `load_trials` reads
the stored trials (`stored_trials`), the bucket length the rounds used (`round_bucket`: the
bucket_seconds the rounds in the window recorded, controller/evidence/load.py `recorded_bucket`,
as the lab's summary reads it; for rounds from before round_settings, the median spacing of the
stored rounds, report_round_times.sql) and each trial prefix's latest decision
(report_trial_state.sql), and loads `Evidence` for the trials that ran in the window.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from controller.evidence.load import Evidence, SampleRule, recorded_bucket, stored_trials
from controller.evidence.settings import EvidenceSettings
from controller.report import trials as report_trials
from controller.report.asn import AsnTable, map_prefixes
from controller.store import Store
from controller.store.decisions import KEEP
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
REQUESTS = "report_http_requests"
REVERTED = "report_reverted_rows"
REVERTED_LIMIT = 50  # rows of the reverted-prefix table; the rest are counted
MIN_BYTES = 102_400  # a flow qualifies when bytes_acked > this (the rollup's and the scoring's default)
ROUND_LIMIT = 5000  # round times per POP read to infer the rounds' bucket length

GOODPUT_HTTP = "http"  # ReportData.goodput_source: from http_requests
GOODPUT_BUSY = "busy_time"  # the fallback: tcpinfo bytes_acked / busy_time


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


def _empty() -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame()


@dataclass
class ReportData:
    window: Window | None
    pops: list[str]
    delivery: pd.DataFrame = field(default_factory=_empty)
    configs: pd.DataFrame = field(default_factory=_empty)
    selections: pd.DataFrame = field(default_factory=_empty)
    groups: pd.DataFrame = field(default_factory=_empty)
    treated: pd.DataFrame = field(default_factory=_empty)  # per (time, grp): the time series
    treated_split: pd.DataFrame = field(default_factory=_empty)  # per (time, grp, phase): before / after t0
    goodput: pd.DataFrame = field(default_factory=_empty)  # per (time, pop): p10, p50
    bbr_share: pd.DataFrame = field(default_factory=_empty)
    cc_split: pd.DataFrame = field(default_factory=_empty)  # treated prefixes: rate by cc and size class
    isp: IspData = field(default_factory=lambda: IspData(enabled=False))
    bucket_seconds: int = 300
    goodput_source: str = GOODPUT_HTTP  # GOODPUT_HTTP or GOODPUT_BUSY (the fallback)
    goodput_why: str = ""  # why the fallback was taken
    http_pops: list[str] = field(default_factory=list)  # POPs with access-log rows in the window
    goodput_groups: pd.DataFrame = field(default_factory=_empty)  # per (time, grp): http goodput
    effect_delivery: pd.DataFrame = field(default_factory=_empty)  # effects.py input, p10 delivery
    effect_goodput: pd.DataFrame = field(default_factory=_empty)  # effects.py input, p10 goodput
    reverted: pd.DataFrame = field(default_factory=_empty)  # newest REVERTED_LIMIT reverts
    reverted_total: int = 0
    pins: pd.DataFrame = field(default_factory=_empty)  # the operator's pins in force (store_pins.sql)
    trials: report_trials.TrialData | None = None  # the effect model's figures (None: no window)


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
    """(first, last) 5-minute bucket of telemetry present for the POP ('' = all), None if none.

    The last bucket is at least the one the latest recorded round falls in: a round exactly at
    the end of the last bucket with data (a lab's last round) is inside the default window.
    """
    rows = store.query_rows(query("report_time_range"), {"pop": pop})
    if not rows or int(rows[0][0]) == 0:
        return None
    first, last = int(rows[0][1]), int(rows[0][2])
    if store.table_exists("round_outcomes"):
        rounds = store.query_rows(query("report_last_round"), {"pop": pop})
        if rounds and int(rounds[0][0]) > 0:
            step = int(BUCKET.total_seconds())
            last = max(last, int(rounds[0][1]) // step * step)

    def utc(ts: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(ts, dt.UTC).replace(tzinfo=None)

    return utc(first), utc(last)


def load(
    store: Store,
    pop: str = "",
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    asn_table: AsnTable | None = None,
    bucket_seconds: int | None = None,
    evidence: EvidenceSettings | None = None,
    min_bytes: int = MIN_BYTES,
    include_app_limited: bool = False,
) -> ReportData:
    """Run every report query for the window (see default_window) and the POP filter ('' = all).

    `bucket_seconds`: time resolution; None picks one (auto_bucket).  300 reads the 5-minute
    rollup; anything else reads the raw tcpinfo table (report_source_raw.sql).
    `evidence`, `min_bytes`, `include_app_limited`: the effect model's settings (load_trials).
    """
    import pandas as pd

    window = default_window(data_span(store, pop), since, until)
    if window is None:  # no telemetry at all: every section is empty, the page says so
        return ReportData(None, [], isp=IspData(enabled=asn_table is not None))
    bucket = int(bucket_seconds or auto_bucket(window))
    source = source_for(bucket)
    params: dict[str, Any] = {"pop": pop, "start": window.start, "end": window.end, "bucket": bucket}
    delivery = _q(store, "report_delivery_by_pop", params, source=source)
    selections = _q(store, "report_selections_per_round", params)
    pops = sorted(set(delivery.get("pop", pd.Series(dtype=str))) | set(selections.get("pop", [])))
    data = ReportData(
        window,
        pops,
        delivery=delivery,
        configs=_q(store, "report_config_versions", params),
        selections=selections,
        groups=_q(store, GROUPS, {"pop": pop, "end": window.end}, time_col="t0_ts"),
        treated=_q(store, "report_treated_vs_holdout", {**params, "split": 0}, source=source, groups=GROUPS).drop(
            columns=["phase"], errors="ignore"
        ),
        treated_split=_q(store, "report_treated_vs_holdout", {**params, "split": 1}, source=source, groups=GROUPS),
        bbr_share=_q(store, "report_bbr_share", params),
        bucket_seconds=bucket,
    )
    data.effect_delivery = _q(store, "report_effect_delivery", params, source=source, groups=GROUPS)
    data.cc_split = _q(store, "report_cc_split", params, groups=GROUPS)
    load_goodput(store, params, data)
    data.reverted = _q(store, "report_reverted", {**params, "limit": REVERTED_LIMIT}, reverted=REVERTED)
    rows = store.query_rows(compose("report_reverted_count", reverted=REVERTED), params)
    data.reverted_total = int(rows[0][0]) if rows else 0
    if store.table_exists("pins"):  # a store from before sql/migrations/012 has none
        data.pins = _q(store, "store_pins", {"pop": pop})
    if asn_table is not None:
        data.isp = load_isp(store, params, asn_table, source)
    data.trials = load_trials(
        store, pop, window, evidence or EvidenceSettings(), bucket, min_bytes, include_app_limited
    )
    return data


def _unix(value: dt.datetime) -> int:
    return int(utc_naive(value).replace(tzinfo=dt.UTC).timestamp())


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


RECORDED_BUCKET = "the bucket length the controller's rounds recorded"
ROUND_SPACING = "the spacing of the controller's rounds"


def round_bucket(store: Store, pop: str, window: Window) -> tuple[int, str] | None:
    """(the bucket length the controller's rounds in the window used, where it came from): the
    bucket_seconds they recorded (round_settings, the same value the lab's summary reads); for
    rounds that recorded none, the median spacing of the stored rounds (report_round_times.sql);
    None with neither (fewer than two rounds in a POP)."""
    recorded = recorded_bucket(store, pop, window.start, window.end)
    if recorded is not None:
        return recorded, RECORDED_BUCKET
    params = {"pop": pop, "start": window.start, "end": window.end, "limit": ROUND_LIMIT}
    times: dict[str, list[int]] = {}
    for p, ts in store.query_rows(query("report_round_times"), params):
        times.setdefault(_text(p), []).append(int(ts))
    spacing = report_trials.spacing(times)
    return None if spacing is None else (spacing, ROUND_SPACING)


def load_trials(
    store: Store,
    pop: str,
    window: Window,
    cfg: EvidenceSettings,
    fallback_bucket: int,
    min_bytes: int = MIN_BYTES,
    include_app_limited: bool = False,
) -> report_trials.TrialData:
    """The effect model's data for the window: the trials that ran in it, Evidence for them in
    buckets of the rounds' length (`fallback_bucket` when the window has too few rounds), and
    each trial prefix's latest decision."""
    found = round_bucket(store, pop, window)
    if found is None:
        bucket, bucket_from = fallback_bucket, "the report's resolution: too few controller rounds in the window"
    else:
        bucket, bucket_from = found
    start, end = _unix(window.start), _unix(window.end)
    every = stored_trials(store, window.end, pop)
    trials = report_trials.in_window(every, start, end, bucket)
    shown = {t.key for t in trials}
    kept_before = sum(
        1 for key, t in report_trials.latest_trials(every).items() if key not in shown and t.outcome == KEEP
    )
    latest: dict[tuple[str, str], str] = {}
    if trials:
        keys = sorted(shown)
        table = {"pop": ("String", [k[0] for k in keys]), "prefix": ("String", [k[1] for k in keys])}
        params = {"pop": pop, "start": window.start, "end": window.end}
        for p, x, decision, _ in store.query_rows_with(query("report_trial_state"), table, params):
            latest[(_text(p), _text(x))] = _text(decision)
    ev = Evidence.for_window(store, cfg, SampleRule(bucket, min_bytes, include_app_limited), trials, end)
    return report_trials.TrialData(
        cfg, bucket, bucket_from, ev, trials, latest, kept_before, include_app_limited, min_bytes
    )


def load_goodput(store: Store, params: dict[str, Any], data: ReportData) -> None:
    """Goodput from http_requests into `data`; the busy_time fallback when it has no row."""
    if not store.table_exists("http_requests"):
        http_rows: list[tuple[Any, ...]] = []
        why = "the store has no http_requests table (run `dyncc schema apply`)"
    else:
        http_rows = store.query_rows(query("report_http_rows"), params)
        why = "no access-log rows (http_requests) in the report window"
    data.http_pops = sorted(str(p) for p, n in http_rows if int(n) > 0)
    if not data.http_pops:
        data.goodput_source, data.goodput_why = GOODPUT_BUSY, why
        data.goodput = _q(store, "report_goodput", params)
        return
    data.goodput_source = GOODPUT_HTTP
    data.goodput = _q(store, "report_goodput_http", params, requests=REQUESTS)
    data.goodput_groups = _q(store, "report_goodput_groups", params, requests=REQUESTS, groups=GROUPS)
    data.effect_goodput = _q(store, "report_effect_goodput", params, requests=REQUESTS, groups=GROUPS)


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
