"""The effect model's data: stored samples and stored decisions, read from a store.

`arm_cells` and `goodput_cells` run sql/queries/evidence_*_buckets.sql for a set of (pop,
prefix)s sent as data (the statement does not grow with them); `pop_control_cells` the POPs'
concurrent controls (sql/queries/evidence_pop_controls.sql); `asked_arms` the arm each round of a
trial or watch asked for (sql/queries/evidence_asked_arms.sql); `stored_trials` reads every
trial from `selections` (sql/queries/evidence_trials.sql); `recorded_bucket` the bucket length
the controller's rounds recorded (round_settings, sql/queries/evidence_round_buckets.sql), which
the report and the lab's summary judge the trials on.  `Evidence.for_window` puts them together
for a window, on the samples a `SampleRule` counts (the scoring's own rule: `SampleRule.of`); it
is the one way in: the round, `explain`, the report and the lab call it, and its methods give the
per-prefix and pooled effects they all show (controller/evidence/model.py).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from controller.evidence.model import CUBIC, Effect, none, pooled
from controller.evidence.settings import EvidenceSettings
from controller.evidence.switchback import (
    CONTROL_SPAN,
    CONTROL_TRAIL,
    PRE_BUCKETS,
    series_of,
    trial_effect,
    watch_effect,
)
from controller.store.decisions import KEEP, ON_BBR_FOR_GOOD
from controller.store.sql import query

if TYPE_CHECKING:
    import pandas as pd

    from controller.store import Store

CELL_COLUMNS = ["pop", "prefix", "ts", "arm", "samples", "value", "app_limited", "mean_log", "var_log"]
GOODPUT_COLUMNS = ["pop", "prefix", "ts", "samples", "value", "mean_log", "var_log"]


def _utc(ts: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(int(ts), dt.UTC).replace(tzinfo=None)


def _keys_table(keys: Iterable[tuple[str, str]]) -> dict[str, tuple[str, list[Any]]]:
    pairs = sorted(set(keys))
    return {"pop": ("String", [p for p, _ in pairs]), "prefix": ("String", [x for _, x in pairs])}


def _frame(rows: list[tuple[Any, ...]], columns: list[str]) -> pd.DataFrame:
    import pandas as pd

    df = pd.DataFrame(rows, columns=columns)
    for col in ("pop", "prefix", "arm"):
        if col in df:
            df[col] = [v.decode() if isinstance(v, bytes) else str(v) for v in df[col]]
    for col in ("ts", "samples", "app_limited"):
        if col in df:
            df[col] = df[col].astype("int64")
    for col in ("value", "mean_log", "var_log"):
        if col in df:
            df[col] = df[col].astype("float64")
    return df


def arm_cells(
    store: Store,
    keys: Iterable[tuple[str, str]],
    start: int,
    end: int,
    bucket_seconds: int,
    min_bytes: int,
    include_app_limited: bool = False,
) -> pd.DataFrame:
    """CELL_COLUMNS rows for the (pop, prefix) `keys` in [start, end) (Unix s)."""
    data = _keys_table(keys)
    if not data["pop"][1] or end <= start:
        return _frame([], CELL_COLUMNS)
    params = {
        "start": _utc(start),
        "end": _utc(end),
        "bucket_seconds": int(bucket_seconds),
        "min_bytes": int(min_bytes),
        "include_app_limited": int(include_app_limited),
    }
    return _frame(store.query_rows_with(query("evidence_arm_buckets"), data, params), CELL_COLUMNS)


def goodput_cells(
    store: Store, keys: Iterable[tuple[str, str]], start: int, end: int, bucket_seconds: int
) -> pd.DataFrame:
    """GOODPUT_COLUMNS rows (access logs) for the (pop, prefix) `keys` in [start, end)."""
    data = _keys_table(keys)
    if not data["pop"][1] or end <= start or not store.table_exists("http_requests"):
        return _frame([], GOODPUT_COLUMNS)
    params = {"start": _utc(start), "end": _utc(end), "bucket_seconds": int(bucket_seconds)}
    return _frame(store.query_rows_with(query("evidence_goodput_buckets"), data, params), GOODPUT_COLUMNS)


def pop_control_cells(
    store: Store,
    pops: Iterable[str],
    start: int,
    end: int,
    bucket_seconds: int,
    min_bytes: int,
    min_samples: int,
    include_app_limited: bool = False,
) -> dict[str, dict[int, float]]:
    """pop -> bucket -> the POP's shock for the buckets in [start, end) of `pops`
    (switchback.pop_controls' definition: CONTROL_TRAIL, CONTROL_SPAN)."""
    names = sorted(set(pops))
    if not names or end <= start:
        return {}
    bs = max(int(bucket_seconds), 1)
    span = CONTROL_SPAN * bs
    params = {
        "read_start": _utc(start - span),
        "start": _utc(start),
        "end": _utc(end),
        "bucket_seconds": bs,
        "min_bytes": int(min_bytes),
        "min_samples": int(min_samples),
        "include_app_limited": int(include_app_limited),
        "trail": CONTROL_TRAIL,
        "span": span,
    }
    out: dict[str, dict[int, float]] = {}
    data = {"pop": ("String", names)}
    for pop, ts, control, _n in store.query_rows_with(query("evidence_pop_controls"), data, params):
        out.setdefault(pop.decode() if isinstance(pop, bytes) else str(pop), {})[int(ts)] = float(control)
    return out


def asked_arms(
    store: Store, starts: Iterable[tuple[str, str, int]], start: int, end: int, bucket_seconds: int
) -> dict[tuple[str, str, int], dict[int, str]]:
    """(pop, prefix, trial start) -> bucket -> the arm its rounds asked for (first round of a bucket)."""
    keys = sorted(set(starts))
    if not keys or end <= start:
        return {}
    data: dict[str, tuple[str, list[Any]]] = {
        "pop": ("String", [k[0] for k in keys]),
        "prefix": ("String", [k[1] for k in keys]),
        "since": ("UInt32", [int(k[2]) for k in keys]),
    }
    params = {"start": _utc(start), "end": _utc(end), "bucket_seconds": int(bucket_seconds)}
    out: dict[tuple[str, str, int], dict[int, str]] = {}

    def text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    for pop, prefix, since, ts, arm in store.query_rows_with(query("evidence_asked_arms"), data, params):
        a = text(arm)
        out.setdefault((text(pop), text(prefix), int(since)), {})[int(ts)] = CUBIC if a == CUBIC else "bbr"
    return out


@dataclass(frozen=True)
class Watch:
    """A prefix on BBR under watch: since its keep (or selection with trials off), its trial's
    start (the rounds' trial_since: the key of its asked arms) and its pre-BBR history's end."""

    pop: str
    prefix: str
    since: int
    trial_since: int

    @property
    def key(self) -> tuple[str, str]:
        return (self.pop, self.prefix)


@dataclass(frozen=True)
class Trial:
    """One trial as the stored decisions hold it."""

    pop: str
    prefix: str
    since: int  # Unix s: the round that started it
    end: int  # the round that ended it (its effect used the buckets before), or the last trial round
    outcome: str  # keep | revert | trial (still running)
    reason: str
    rounds: int
    latest: str = ""  # the prefix's latest decision of all ('' = not read)

    @property
    def in_force(self) -> bool:
        """Kept by this trial and still on BBR (its latest decision is keep)."""
        return self.outcome == KEEP and self.latest in ("", *ON_BBR_FOR_GOOD)

    @property
    def key(self) -> tuple[str, str]:
        return (self.pop, self.prefix)


def stored_trials(store: Store, end: dt.datetime, pop: str = "") -> list[Trial]:
    """Every trial of `pop` ('' = all) decided in rounds before `end` (naive UTC or aware)."""
    if end.tzinfo is not None:
        end = end.astimezone(dt.UTC).replace(tzinfo=None)
    rows = store.query_rows(query("evidence_trials"), {"pop": pop, "end": end})

    def text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    return [
        Trial(text(p), text(x), int(s), int(e), text(o), text(r), int(n), text(latest))
        for p, x, s, e, o, r, n, latest in rows
    ]


def recorded_bucket(store: Store, pop: str, start: dt.datetime, end: dt.datetime) -> int | None:
    """The bucket length (s) the controller's rounds in [start, end) recorded (naive UTC or aware
    bounds; pop '' = all): the one most of them used, the latest on a tie; None when no round
    there recorded one (rounds from before sql/migrations/011, or a store without the table)."""
    if not store.table_exists("round_settings"):
        return None
    bounds = [t.astimezone(dt.UTC).replace(tzinfo=None) if t.tzinfo is not None else t for t in (start, end)]
    rows = store.query_rows(query("evidence_round_buckets"), {"pop": pop, "start": bounds[0], "end": bounds[1]})
    return int(rows[0][0]) if rows and int(rows[0][0]) > 0 else None


class ScoringLike(Protocol):
    """What SampleRule.of reads of a ScoringSettings (controller/scoring/settings.py, above this package)."""

    @property
    def bucket_seconds(self) -> int: ...
    @property
    def min_bytes(self) -> int: ...
    @property
    def include_app_limited(self) -> bool: ...


@dataclass(frozen=True)
class SampleRule:
    """Which samples the effect model counts and in which buckets: the scoring's own rule (bulk
    flows of `min_bytes` or more, app-limited samples left out unless `include_app_limited`), so
    a figure is judged on the samples its decisions were."""

    bucket_seconds: int
    min_bytes: int
    include_app_limited: bool = False

    @classmethod
    def of(cls, scoring: ScoringLike, bucket_seconds: int | None = None) -> SampleRule:
        """The rule of a ScoringSettings; `bucket_seconds` when the rounds recorded another bucket."""
        bucket = scoring.bucket_seconds if bucket_seconds is None else bucket_seconds
        return cls(int(bucket), int(scoring.min_bytes), bool(scoring.include_app_limited))


@dataclass
class Evidence:
    """Per-prefix and pooled effects of a set of trials (and watches), from one read of the store.

    A trial's effect counts the buckets in [its start, its end): for an ended trial the round
    that ended it, for a running one its latest round: exactly the buckets that round judged,
    so the same store gives the same figures to the decision, the summary, the report and
    `explain`.  `until` only bounds what is read.  The cells reach back PRE_BUCKETS before the
    earliest start (the pre-trial history, controller/evidence/switchback.py).
    """

    cfg: EvidenceSettings
    bucket_seconds: int
    trials: list[Trial]
    cells: pd.DataFrame
    goodput: pd.DataFrame
    until: int
    controls: dict[str, dict[int, float]] = field(default_factory=dict)
    asked: dict[tuple[str, str, int], dict[int, str]] = field(default_factory=dict)
    watches: list[Watch] = field(default_factory=list)
    delivery: dict[tuple[str, str, int], Effect] = field(default_factory=dict)
    goodput_effects: dict[tuple[str, str, int], Effect] = field(default_factory=dict)
    watch_effects: dict[tuple[str, str], Effect] = field(default_factory=dict)

    @classmethod
    def for_window(
        cls,
        store: Store,
        cfg: EvidenceSettings,
        rule: SampleRule,
        trials: Sequence[Trial],
        until: int,
        *,
        with_goodput: bool = True,
        watches: Sequence[Watch] = (),
    ) -> Evidence:
        """The one way in: the effects of `trials` (and `watches`) on the samples `rule` counts,
        read up to `until` (Unix s).  The round, `explain`, the report and the lab all call it."""
        bucket_seconds, min_bytes, include_app_limited = rule.bucket_seconds, rule.min_bytes, rule.include_app_limited
        bs = max(bucket_seconds, 1)
        keys = {t.key for t in trials} | {w.key for w in watches}
        first = min([t.since for t in trials] + [w.trial_since or w.since for w in watches], default=until)
        start = first - first % bs - PRE_BUCKETS * bs
        cells = arm_cells(store, keys, start, until, bucket_seconds, min_bytes, include_app_limited)
        good = goodput_cells(store, keys, start, until, bucket_seconds) if with_goodput else _frame([], GOODPUT_COLUMNS)
        controls = (
            pop_control_cells(store, {k[0] for k in keys}, start, until, bucket_seconds, min_bytes,
                              cfg.min_arm_samples, include_app_limited)
            if cfg.controls else {}
        )  # fmt: skip
        starts = [(t.pop, t.prefix, t.since) for t in trials] + [(w.pop, w.prefix, w.trial_since) for w in watches]
        asked = asked_arms(store, starts, start, until + bs, bucket_seconds)
        ev = cls(cfg, bucket_seconds, list(trials), cells, good, until, controls, asked, list(watches))
        ev.compute()
        return ev

    def window(self, t: Trial) -> tuple[int, int]:
        """The buckets a trial's effect counts: from the bucket its first round fell in (a round
        runs a little after the bucket boundary; the bucket's samples mostly ran the first arm, a
        mixed one is left out by purity) to min(end, until)."""
        return (t.since - t.since % max(self.bucket_seconds, 1), min(t.end, self.until))

    def compute(self) -> None:
        cfg = self.cfg
        series = series_of(self.cells, cfg)
        self.delivery = {}
        for t in self.trials:
            _, end = self.window(t)
            self.delivery[(t.pop, t.prefix, t.since)] = trial_effect(
                series.get(t.key), t.since, end, self.asked.get((t.pop, t.prefix, t.since), {}),
                self.controls.get(t.pop), cfg, self.bucket_seconds,
            )  # fmt: skip
        self.watch_effects = {
            w.key: watch_effect(series.get(w.key), w.since, self.until,
                                self.asked.get((w.pop, w.prefix, w.trial_since), {}),
                                self.controls.get(w.pop), cfg, self.bucket_seconds, pre_until=w.trial_since)
            for w in self.watches
        }  # fmt: skip
        self.goodput_effects = self._goodput(series)

    def _goodput(self, series: dict[tuple[str, str], Any]) -> dict[tuple[str, str, int], Effect]:
        """Goodput effects: the access-log requests of each bucket with the arm the same prefix's
        tcpinfo samples ran in it (access logs do not know the congestion control), no controls."""
        cfg = self.cfg
        out: dict[tuple[str, str, int], Effect] = {}
        g = self.goodput
        if len(g):
            import numpy as np
            import pandas as pd

            arms = [
                pd.DataFrame({"pop": k[0], "prefix": k[1], "ts": s.ts, "arm": s.arm})
                for k, s in series.items() if len(s.ts)
            ]  # fmt: skip
            if arms:
                a = pd.concat(arms, ignore_index=True)
                g = g.merge(a[a["arm"] != ""], on=["pop", "prefix", "ts"], how="inner")
                g = g[(g["samples"] >= 1) & (g["value"] > 0) & np.isfinite(g["mean_log"])]
            else:
                g = g.iloc[0:0]
        if not len(g):
            why = "no access-log requests in the trial's arm buckets"
            return {(t.pop, t.prefix, t.since): none(why, cfg.level) for t in self.trials}
        good_series = series_of(g.assign(app_limited=0), cfg.replaced(min_arm_samples=1))
        for t in self.trials:
            _, end = self.window(t)
            out[(t.pop, t.prefix, t.since)] = trial_effect(
                good_series.get(t.key), t.since, end, self.asked.get((t.pop, t.prefix, t.since), {}), None, cfg,
                self.bucket_seconds,
            )  # fmt: skip
        return out

    def effect(self, t: Trial, metric: str = "delivery") -> Effect:
        table = self.delivery if metric == "delivery" else self.goodput_effects
        return table.get((t.pop, t.prefix, t.since)) or none("not loaded", self.cfg.level)

    def pooled(self, trials: Sequence[Trial], metric: str = "delivery") -> Effect:
        """The random-effects pool over `trials` (each prefix's latest trial among them)."""
        latest: dict[tuple[str, str], Trial] = {}
        for t in sorted(trials, key=lambda t: t.since):
            latest[t.key] = t
        return pooled([self.effect(t, metric) for t in latest.values()], self.cfg.level, trials=len(trials))

    def app_limited_share(self, trials: Sequence[Trial] | None = None) -> float:
        """Share of the trials' qualifying samples left out as app-limited (nan without samples)."""
        c = self.cells
        if trials is not None and len(c):
            keys = {t.key for t in trials}
            c = c[[(p, x) in keys for p, x in zip(c["pop"], c["prefix"], strict=True)]]
        counted = float(c["samples"].sum()) if len(c) else 0.0
        left = float(c["app_limited"].sum()) if len(c) else 0.0
        return left / (counted + left) if counted + left else math.nan
