"""The report's effect figures: which trials count, which prefixes are in force, and the pooled
and per-prefix effects of controller/evidence, the one effect model.  Pure: no I/O (data.py
reads the store, write.py draws the section).

Which trials: every trial (controller/evidence/load.py `stored_trials`) that ran in the report
window: it started before the window's end and its last bucket lies in the window (an ended
trial: the round that ended it is after the window's start; a running one: its last trial
round is less than a bucket before the start).  Its effect counts all its buckets, those before
the window's start included: the same buckets its deciding round judged.

In force: a prefix whose latest trial among them ended 'keep' (controller/evidence/summary.py
`in_force`).  The report also reads each trial prefix's latest decision in the window, to mark a
kept prefix that was reverted later (for lack of traffic, or denied) in the table and a note.

Two pools per metric (docs/report.md defines them): the prefixes in force, which were chosen
by their own trial's result and so lean high, and every trial (kept, reverted and running),
which is the unbiased estimate of what BBR does to a newly selected prefix.  The headline's
text is controller/evidence/summary.py `headline_lines`, which the lab's summary prints too.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from controller.evidence import summary as evidence_summary
from controller.evidence.load import Evidence, Trial
from controller.evidence.model import Effect, pct
from controller.evidence.settings import EvidenceSettings
from controller.evidence.trial import short
from controller.store.decisions import KEEP, ON_BBR_FOR_GOOD, REVERT, TRIAL

__all__ = [
    "ALL",
    "ALL_TRIALS",
    "IN_FORCE",
    "METRICS",
    "TRIAL_ROWS",
    "WHICH",
    "Pool",
    "TrialData",
    "TrialRow",
    "effect_class",
    "headline_lines",
    "in_window",
    "latest_trials",
    "mde_text",
    "pools",
    "rows",
    "spacing",
]

ALL = "all POPs"
IN_FORCE = "in force"
ALL_TRIALS = "all trials"
#: metric key (Evidence's) -> label
METRICS = {"delivery": "p10 delivery rate", "goodput": "p10 goodput"}
WHICH = {IN_FORCE: "prefixes in force", ALL_TRIALS: "all trials"}
TRIAL_ROWS = 200  # rows of the per-prefix table; the rest are counted
OUTCOME = {KEEP: "keep", REVERT: "revert", TRIAL: "running"}


@dataclass
class TrialData:
    """What the report read for its effect figures (data.py `load_trials`)."""

    cfg: EvidenceSettings
    bucket_seconds: int  # the bucket length the trials were judged on
    bucket_from: str  # where it came from, in words
    evidence: Evidence
    trials: list[Trial]  # the trials that ran in the window, oldest first
    latest: dict[tuple[str, str], str] = field(default_factory=dict)  # (pop, prefix) -> latest decision
    kept_before: int = 0  # prefixes kept by a trial that ended before the window (not in the figures)
    include_app_limited: bool = False
    min_bytes: int = 0

    @property
    def in_force(self) -> list[Trial]:
        return evidence_summary.in_force(self.trials)

    @property
    def reverted_since(self) -> list[Trial]:
        """Kept by their trial, but reverted later (their latest decision is not on BBR): not in
        force, so not in the in-force figures."""
        return [
            t
            for t in evidence_summary.latest(self.trials)
            if t.outcome == KEEP and self.latest.get(t.key, t.latest or KEEP) not in ON_BBR_FOR_GOOD
        ]


def spacing(times: Mapping[str, Sequence[int]]) -> int | None:
    """The median spacing (s) of consecutive round times, over every POP; None without two."""
    gaps: list[int] = []
    for ts in times.values():
        ordered = sorted({int(t) for t in ts})
        gaps.extend(b - a for a, b in pairwise(ordered))
    if not gaps:
        return None
    gaps.sort()
    mid = len(gaps) // 2
    median = gaps[mid] if len(gaps) % 2 else (gaps[mid - 1] + gaps[mid]) / 2
    return max(1, round(median))


def in_window(trials: Sequence[Trial], start: int, end: int, bucket_seconds: int) -> list[Trial]:
    """The trials that ran in [start, end) (Unix s): see the module docstring."""
    out = []
    for t in trials:
        if t.since >= end:
            continue
        last = t.end + bucket_seconds if t.outcome == TRIAL else t.end
        if last > start:
            out.append(t)
    return sorted(out, key=lambda t: (t.since, t.pop, t.prefix))


def latest_trials(trials: Sequence[Trial]) -> dict[tuple[str, str], Trial]:
    """(pop, prefix) -> its latest trial."""
    return {t.key: t for t in evidence_summary.latest(trials)}


@dataclass(frozen=True)
class Pool:
    """One pooled effect: a scope (a POP or ALL), a set of trials, a metric."""

    scope: str
    which: str  # IN_FORCE or ALL_TRIALS
    metric: str  # a METRICS key
    effect: Effect
    prefixes: int  # prefixes in the set (with or without an effect)


def pools(data: TrialData, pops: Sequence[str]) -> list[Pool]:
    """Per scope (ALL, then each POP when there are several) and set: both metrics' pools."""
    ev = data.evidence
    forced = data.in_force  # the same set as evidence_summary.pools(ev) for ALL
    scopes: list[tuple[str, list[str] | None]] = [(ALL, None)]  # ALL: every trial, as the headline
    if len(pops) > 1:
        scopes += [(pop, [pop]) for pop in pops]
    out = []
    for scope, members in scopes:
        sets = {
            IN_FORCE: [t for t in forced if members is None or t.pop in members],
            ALL_TRIALS: [t for t in data.trials if members is None or t.pop in members],
        }
        for which, trials in sets.items():
            n = len({t.key for t in trials})
            for metric in METRICS:
                out.append(Pool(scope, which, metric, ev.pooled(trials, metric), n))
    return out


def headline_lines(data: TrialData) -> tuple[list[str], list[str]]:
    """The headline (controller/evidence/summary.py `headline_lines`: the lab prints the same
    lines for the same store and window), then the report's notes: which figure is which."""
    lines = evidence_summary.headline_lines(data.evidence)
    notes = [
        "In force: the prefixes whose latest trial kept them on BBR; chosen by their own result, their pool "
        "leans high. All trials: every trial that ran in the window (kept, reverted or running), the "
        "unbiased estimate of what BBR does to a newly selected prefix. Each effect is the prefix's BBR "
        f"blocks against its CUBIC blocks (buckets of {data.bucket_seconds} s: {data.bucket_from}; "
        f"qualifying samples: flows with more than {data.min_bytes:,} bytes acknowledged"
        + ("; app-limited samples included)." if data.include_app_limited else ").")
    ]
    later = data.reverted_since
    if later:
        notes.append(
            f"{len(later)} of the prefixes in force by their trial were reverted later (no traffic, or denied): "
            "they are no longer on BBR; the table of trials marks them."
        )
    if data.kept_before:
        notes.append(
            f"{data.kept_before} prefixes kept by trials that ended before the window are not in these "
            "figures (widen --since to include them)."
        )
    return lines, notes


@dataclass(frozen=True)
class TrialRow:
    cells: list[str]
    classes: list[str]


def effect_class(e: Effect) -> str:
    """'good' when the interval lies above 0, 'bad' below, else ''."""
    if not (e.ok and e.has_interval):
        return ""
    return "good" if e.low > 0 else ("bad" if e.high < 0 else "")


def rows(data: TrialData, limit: int = TRIAL_ROWS) -> list[TrialRow]:
    """The per-prefix table, newest trial first, at most `limit` rows (the caller counts the rest)."""
    ev = data.evidence
    out = []
    newest = sorted(data.trials, key=lambda t: (-t.since, t.pop, t.prefix))[:limit]
    per_block = max(1, data.cfg.trial_block_rounds)
    for t in newest:
        d, g = ev.effect(t, "delivery"), ev.effect(t, "goodput")
        decision = OUTCOME.get(t.outcome, t.outcome)
        why = t.reason
        latest = data.latest.get(t.key, "")
        if t.outcome == KEEP and latest and latest not in ON_BBR_FOR_GOOD:
            decision = f"keep, then {latest}"
            why = f"{why} (no longer on BBR: its latest decision is {latest})"
        start = dt.datetime.fromtimestamp(t.since, dt.UTC)
        cells = [
            t.pop,
            t.prefix,
            f"{start:%Y-%m-%d %H:%M:%S}",
            f"{math.ceil(t.rounds / per_block)} / {t.rounds}",
            f"{d.n_a} / {d.n_b}",
            f"{d.samples:,}",
            short(d),
            short(g),
            decision,
            why,
        ]
        out.append(TrialRow(cells, ["", "", "", "", "", "", effect_class(d), effect_class(g), "", ""]))
    return out


def mde_text(e: Effect) -> str:
    return pct(e.mde).lstrip("+") if math.isfinite(e.mde) else "–"
