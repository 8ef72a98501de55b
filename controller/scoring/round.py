"""One controller round: refresh the scoring cache, score, decide, record, desired state.

I/O glue around the pure pieces: controller/scoring/query.py (SQL),
controller/scoring/decide.py (decisions), controller/scoring/state.py
(the selections table), controller/scoring/round_settings.py (the round's settings,
round_settings), controller/store/outcomes.py (round_outcomes).  The
rollout side takes the DesiredState list and answers with a PublishOutcome per
POP (controller/rollout/publish.py), recorded in round_outcomes.

Prefixes the caller's `refuse` rule turns down (`dyncc control` passes the
config validation's per-prefix rule: deny list, built-in ranges, length,
canonical form) are never selected: they are skipped (or reverted, when on
BBR) with the reason "denied: ...", so one bad prefix cannot get a POP's
whole config rejected.  Scoring never imports the rollout side.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from controller.evidence.load import Evidence, SampleRule, Trial, Watch
from controller.evidence.model import BBR, CUBIC, Effect
from controller.evidence.settings import EvidenceSettings
from controller.scoring.decide import (
    KEEP,
    PIN,
    SELECT,
    TRIAL,
    PopSummary,
    decide,
    summarize,
)
from controller.scoring.desired import DesiredEntry, DesiredState
from controller.scoring.frames import pop_bounds, sort_key, sorting, texts
from controller.scoring.incremental import drop_old_state, score_incrementally
from controller.scoring.pins import load_pins
from controller.scoring.query import packs_masks, refresh, score_prefixes, window_for
from controller.scoring.round_settings import (
    deny_change,
    deny_text,
    previous_deny,
    write_round_controls,
    write_round_settings,
)
from controller.scoring.settings import ScoringSettings
from controller.scoring.state import StateMemo, load_previous, write_round
from controller.statistics.cache import drop_old_cache
from controller.statistics.source import Window, epoch_seconds
from controller.store.outcomes import RECORDED, PublishOutcome, write_outcomes

if TYPE_CHECKING:
    import pandas as pd

    from controller.store import Store

log = logging.getLogger("dyncc.control")


@dataclass
class RoundResult:
    round_id: str
    round_time_ns: int
    window: Window
    decisions: pd.DataFrame
    states: list[DesiredState]
    summaries: list[PopSummary]
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)
    written: int = 0
    outcomes: dict[str, PublishOutcome] = field(default_factory=dict)  # per POP, once published
    publish_error: str = ""  # why the publisher could publish nothing this round ('' = it ran)


def new_round_id(now: dt.datetime) -> str:
    return f"{now.astimezone(dt.UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def desired_states(decisions: pd.DataFrame, round_id: str, round_time_ns: int) -> list[DesiredState]:
    """One DesiredState per POP in the decisions: the prefixes on BBR after this round, by prefix."""
    pops = texts(decisions["pop"])
    dec = texts(decisions["decision"])
    order = sorting(sort_key(pops, texts(decisions["prefix"])))
    rows = np.arange(len(pops)) if order is None else order
    pops = pops[rows]
    algo = texts(decisions["algorithm"])[rows]
    # a kept prefix in a holdback bucket of its watch asks CUBIC: not in the config that round
    chosen = (dec[rows] == SELECT) | ((dec[rows] == KEEP) & (algo != CUBIC)) | ((dec[rows] == TRIAL) & (algo == BBR))
    chosen |= (dec[rows] == PIN) & (algo != CUBIC)  # a BBR pin is in the config, a cubic pin is not
    new = decisions["new"].to_numpy(dtype=bool)[rows] if "new" in decisions else np.zeros(len(rows), dtype=bool)
    since = decisions["trial_since"].to_numpy(dtype="int64")[rows] if "trial_since" in decisions else None
    # a trial's prefix after its first round: toggled, kept or reverted by its trial
    toggling = (since > 0) & ~new if since is not None else np.zeros(len(rows), dtype=bool)
    prefixes = texts(decisions["prefix"])[rows]
    states = []
    for a, b in pop_bounds(pops):
        picked = rows[a:b][chosen[a:b]]
        trial_prefixes = {}
        if since is not None:
            for j in np.flatnonzero(toggling[a:b]).tolist():
                trial_prefixes[str(prefixes[a + j])] = int(since[a + j]) * 1_000_000_000
        entries = [
            DesiredEntry(
                prefix=str(r["prefix"]),
                algorithm=str(r["algorithm"]),
                duty_cycle=float(r["duty_cycle"]),
                flap_ratio=float(r["flap_ratio"]),
                median_delivery_rate=float(r["median_delivery_rate"]),
                median_min_rtt_ms=float(r["median_min_rtt_ms"]),
                reason=f"{r['decision']}: {r['reason']}",
            )
            for r in decisions.iloc[picked].to_dict("records")
        ]
        states.append(
            DesiredState(
                pop=str(pops[a]),
                round_id=round_id,
                round_time_ns=round_time_ns,
                entries=entries,
                trial_prefixes=trial_prefixes,
            )
        )
    return states


def round_effects(
    store: Store, cfg: ScoringSettings, evidence: EvidenceSettings | None, previous: pd.DataFrame, until: int
) -> tuple[dict[tuple[str, str], Effect], dict[tuple[str, str], Effect]]:
    """The effects a round judges, from one read of the store over [their start, until): each
    running trial's in `previous` and each watched prefix's (on BBR, kept or selected with trials
    off: its holdback buckets since `selected_since`)."""
    if evidence is None or previous.empty:
        return {}, {}
    dec = texts(previous["decision"])
    since = previous["trial_since"].to_numpy(dtype="int64")
    running = np.flatnonzero((dec == TRIAL) & (since > 0)) if evidence.trials else np.zeros(0, dtype=np.int64)
    watched = np.flatnonzero(((dec == KEEP) | (dec == SELECT)) & (since > 0)) if evidence.holdback else running[:0]
    if not len(running) and not len(watched):
        return {}, {}
    pops, prefixes = texts(previous["pop"]), texts(previous["prefix"])
    selected = previous["selected_since"].to_numpy(dtype="int64")
    trials = [Trial(str(pops[j]), str(prefixes[j]), int(since[j]), until, TRIAL, "", 0) for j in running.tolist()]
    watches = [
        Watch(str(pops[j]), str(prefixes[j]), int(selected[j]) or int(since[j]), int(since[j]))
        for j in watched.tolist()
    ]
    ev = Evidence.for_window(store, evidence, SampleRule.of(cfg), trials, until, with_goodput=False, watches=watches)
    return {t.key: ev.effect(t) for t in trials}, dict(ev.watch_effects)


def log_deny_changes(store: Store, pop: str, now: dt.datetime, deny: Sequence[str]) -> None:
    """A warning per POP whose previous round applied another deny list (e.g. a --deny flag
    dropped: its prefixes may be selected again)."""
    for name, (round_id, before) in sorted(previous_deny(store, pop, now).items()):
        change = deny_change(before, deny_text(deny))
        if change:
            log.warning("POP %s: the deny list changed since round %s: %s", name, round_id, change)


def round_scores(
    store: Store, cfg: ScoringSettings, window: Window, pop: str, round_time_ns: int, timings: dict[str, float]
) -> pd.DataFrame:
    """Refresh the scoring cache and score every prefix of `pop` in `window` (incrementally when
    cfg.incremental and the window packs into masks); the seconds of each step go to `timings`."""
    # a cluster: a round that cannot read every shard would score part of the prefixes as if
    # they were all; it fails here (StoreUnavailable naming the shard) and publishes nothing
    store.check_shards()
    t = time.perf_counter()
    keys = refresh(store, cfg, window, pop, round_time_ns)
    timings["refresh"] = time.perf_counter() - t
    t = time.perf_counter()
    if cfg.incremental and packs_masks(window):
        scores = score_incrementally(store, cfg, window, pop, keys, round_time_ns)
        drop_old_state(store, cfg)
    else:
        scores = score_prefixes(store, cfg, window, pop, keys)
    timings["score"] = time.perf_counter() - t
    return scores


def run_round(
    store: Store,
    cfg: ScoringSettings,
    now: dt.datetime,
    pop: str = "",
    dry_run: bool = False,
    publishing: bool = False,
    refuse: Callable[[str], str | None] | None = None,
    evidence: EvidenceSettings | None = None,
    deny: Sequence[str] = (),
    memo: StateMemo | None = None,
) -> RoundResult:
    """Score every prefix of `pop` ('' = all POPs) at `now`; write selections unless dry_run.

    publishing: a publisher answers for this round, so the previous state is the latest
    round in force (published / unchanged); without one, recorded rounds count too.
    refuse: the per-prefix rule that filters the desired state ("why" or None): the caller
    passes validation's rule (controller/rollout/validate.py `refusal(policy)`); None
    refuses nothing (scoring does not know the publisher's policy).
    evidence: the effect model's and trials' settings (None: no trials); the running trials'
    effects are read from raw tcpinfo (controller/evidence/load.py) before deciding.
    deny: the deny list behind `refuse`, as given: recorded per POP in round_controls with the
    cap and the number of pins, and a change from the previous round's list is logged.
    The pins in force (controller/scoring/pins.py) are read and held (decision `pin`).
    memo: the state this process's last round wrote (a long-running controller keeps one):
    the previous state comes from it when its rounds are the ones in force, and it keeps this
    round's once written (controller/scoring/state.py StateMemo).
    Not a dry run: the selections rows, a round_settings row (cfg, evidence)
    and a `recorded` round_outcomes row per POP are written.  The scoring_cache cache is
    refreshed even in a dry run (derived data).
    """
    started = time.perf_counter()
    now = now if now.tzinfo else now.replace(tzinfo=dt.UTC)
    round_time_ns = epoch_seconds(now) * 1_000_000_000 + now.microsecond * 1000
    round_id = new_round_id(now)
    window = window_for(now, cfg)
    timings: dict[str, float] = {}

    scores = round_scores(store, cfg, window, pop, round_time_ns, timings)
    t = time.perf_counter()
    # a dry run reads the store: it must leave the memo to the next round that writes
    previous = load_previous(store, pop, now, include_recorded=not publishing, memo=None if dry_run else memo)
    timings["previous"] = time.perf_counter() - t
    t = time.perf_counter()
    effects, watch = round_effects(store, cfg, evidence, previous, epoch_seconds(window.end))
    timings["evidence"] = time.perf_counter() - t
    pins = load_pins(store, pop)
    t = time.perf_counter()
    decisions = decide(
        scores,
        previous,
        epoch_seconds(now),
        cfg,
        refuse=refuse,
        evidence=evidence,
        trial_effects=effects,
        pins=pins,
        watch_effects=watch,
    )
    timings["decide"] = time.perf_counter() - t
    states = desired_states(decisions, round_id, round_time_ns)
    written = 0
    if not dry_run:
        t = time.perf_counter()
        if memo is not None:
            memo.forget()  # until this round's rows are in the store
        written = write_round(store, decisions, round_id, round_time_ns)
        if memo is not None and written:
            memo.remember(decisions, round_id)
        if written:
            pops = texts(decisions["pop"])
            write_round_settings(store, pops, round_id, round_time_ns, cfg, evidence)
            log_deny_changes(store, pop, now, deny)
            per_pop = Counter(p for p, _ in pins)
            write_round_controls(store, pops, round_id, round_time_ns, deny, cfg.max_per_pop, per_pop)
        write_outcomes(store, [(s, PublishOutcome(s.pop, RECORDED)) for s in states])
        drop_old_cache(store, window)
        timings["write"] = time.perf_counter() - t
    return RoundResult(
        round_id=round_id,
        round_time_ns=round_time_ns,
        window=window,
        decisions=decisions,
        states=states,
        summaries=summarize(decisions),
        seconds=time.perf_counter() - started,
        timings=timings,
        written=written,
    )
