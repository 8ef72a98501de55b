"""The effect model's data: stored samples and stored decisions, read from a store.

`arm_cells` and `goodput_cells` run sql/queries/evidence_*_buckets.sql for a set of (pop,
prefix)s sent as data (the statement does not grow with them); `stored_trials` reads every
trial from `selections` (sql/queries/evidence_trials.sql); `recorded_bucket` the bucket length
the controller's rounds recorded (round_settings, sql/queries/evidence_round_buckets.sql), which
the report and the lab's summary judge the trials on.  `Evidence.load` puts them together
for a window, and its methods give the per-prefix and pooled effects that the controller's
decisions, the lab summary, the report and `explain` all show (controller/evidence/model.py).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from controller.evidence.model import (
    Effect,
    arm_buckets,
    none,
    pooled,
    trial_effects,
)
from controller.evidence.settings import EvidenceSettings
from controller.store.sql import query

if TYPE_CHECKING:
    import pandas as pd

    from controller.store import Store

CELL_COLUMNS = ["pop", "prefix", "ts", "arm", "samples", "value", "app_limited"]
GOODPUT_COLUMNS = ["pop", "prefix", "ts", "samples", "value"]


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
    if "value" in df:
        df["value"] = df["value"].astype("float64")
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
        return self.outcome == "keep" and self.latest in ("", "keep", "select")

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


@dataclass
class Evidence:
    """Per-prefix and pooled effects of a set of trials, from one read of the store.

    A trial's effect counts the buckets in [its start, its end): for an ended trial the round
    that ended it, for a running one its latest round: exactly the buckets that round judged,
    so the same store gives the same figures to the decision, the summary, the report and
    `explain`.  `until` only bounds what is read.
    """

    cfg: EvidenceSettings
    bucket_seconds: int
    trials: list[Trial]
    cells: pd.DataFrame
    goodput: pd.DataFrame
    until: int
    delivery: dict[tuple[str, str, int], Effect] = field(default_factory=dict)
    goodput_effects: dict[tuple[str, str, int], Effect] = field(default_factory=dict)

    @classmethod
    def load(
        cls,
        store: Store,
        cfg: EvidenceSettings,
        trials: Sequence[Trial],
        bucket_seconds: int,
        until: int,
        min_bytes: int,
        include_app_limited: bool = False,
        with_goodput: bool = True,
    ) -> Evidence:
        keys = {t.key for t in trials}
        start = min((t.since - t.since % max(bucket_seconds, 1) for t in trials), default=until)
        cells = arm_cells(store, keys, start, until, bucket_seconds, min_bytes, include_app_limited)
        good = goodput_cells(store, keys, start, until, bucket_seconds) if with_goodput else _frame([], GOODPUT_COLUMNS)
        ev = cls(cfg, bucket_seconds, list(trials), cells, good, until)
        ev.compute()
        return ev

    def window(self, t: Trial) -> tuple[int, int]:
        """The buckets a trial's effect counts: from the bucket its first round fell in (a round
        runs a little after the bucket boundary; the bucket's samples mostly ran the first arm, a
        mixed one is left out by purity) to min(end, until)."""
        return (t.since - t.since % max(self.bucket_seconds, 1), min(t.end, self.until))

    def compute(self) -> None:
        cfg = self.cfg
        buckets = arm_buckets(self.cells, cfg.purity, cfg.min_arm_samples)
        self.delivery = self._per_trial(buckets)
        if len(self.goodput) and len(buckets):
            arms = buckets[["pop", "prefix", "ts", "arm"]]
            g = self.goodput.merge(arms, on=["pop", "prefix", "ts"], how="inner")
            g = g[(g["samples"] >= 1) & (g["value"] > 0)].copy()
            import numpy as np

            g["y"] = np.log(g["value"].to_numpy(float)) if len(g) else np.zeros(0)
            self.goodput_effects = self._per_trial(g)
        else:
            self.goodput_effects = {
                (t.pop, t.prefix, t.since): none("no access-log requests in the trial's arm buckets", cfg.level)
                for t in self.trials
            }

    def _per_trial(self, buckets: pd.DataFrame) -> dict[tuple[str, str, int], Effect]:
        out: dict[tuple[str, str, int], Effect] = {}
        # one prefix may have had several trials: each is judged on its own window, so the trials
        # go in groups of at most one per prefix (its 1st, 2nd, ... trial)
        by_round: dict[int, list[Trial]] = {}
        seen: dict[tuple[str, str], int] = {}
        for t in sorted(self.trials, key=lambda t: t.since):
            nth = seen.get(t.key, 0)
            seen[t.key] = nth + 1
            by_round.setdefault(nth, []).append(t)
        for group in by_round.values():
            windows = {t.key: self.window(t) for t in group}
            effects = trial_effects(buckets, windows, self.cfg.level, self.cfg.min_arm_buckets, self.bucket_seconds)
            for t in group:
                out[(t.pop, t.prefix, t.since)] = effects[t.key]
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
