"""Random inputs of controller/scoring/decide.py `decide` with every feature on: trials (running,
kept, reverted, inconclusive, switched off), the watch, pins of both algorithms, a lowered cap and
the deny list, besides the scores and states of tests/controller/scoring/test_decide_equal.py."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from controller.evidence.model import Effect
from controller.evidence.settings import EvidenceSettings
from controller.scoring.pins import Pin
from controller.scoring.settings import ScoringSettings
from tests.controller.scoring.test_decide_equal import HOUR, NOW, random_case, refuse_some

PREVIOUS = ("select", "keep", "revert", "holdout", "skip", "trial", "pin")
Key = tuple[str, str]


@dataclass
class Case:
    scores: pd.DataFrame
    state: pd.DataFrame
    cfg: ScoringSettings
    expire: int
    refuse: Any = None
    evidence: EvidenceSettings | None = None
    trial_effects: dict[Key, Effect] = field(default_factory=dict)
    watch_effects: dict[Key, Effect] = field(default_factory=dict)
    pins: dict[Key, Pin] = field(default_factory=dict)

    def kwargs(self) -> dict[str, Any]:
        return {
            "refuse": self.refuse,
            "evidence": self.evidence,
            "trial_effects": self.trial_effects,
            "pins": self.pins,
            "watch_effects": self.watch_effects,
        }


def _effect(rng: np.random.Generator, level: float) -> Effect:
    est = float(rng.choice([-0.4, -0.1, 0.0, 0.05, 0.2, 0.6]))
    half = float(rng.choice([0.02, 0.1, 0.5, 2.0]))
    n_a, n_b = int(rng.integers(0, 60)), int(rng.integers(0, 60))
    return Effect(est, est - half, est + half, level, math.log1p(est), half / 2, n_a, n_b, 10 * (n_a + n_b))


def full_case(seed: int) -> Case:
    """A random case of `random_case(seed)` with trials, the watch, pins and the deny list."""
    scores, state, cfg, _ = random_case(seed)
    rng = np.random.default_rng(10_000 + seed)
    state = state.copy()
    m = len(state)
    decision = np.array(PREVIOUS, dtype=object)[rng.integers(0, len(PREVIOUS), m)]
    state["decision"] = decision
    trial = decision == "trial"
    on = np.isin(decision, ("select", "keep", "trial"))
    state["selected_since"] = np.where(on, NOW - rng.choice([1, 2, 24, 48], m) * HOUR, 0)
    had = trial | ((rng.random(m) < 0.4) & np.isin(decision, ("keep", "revert")))
    state["trial_since"] = np.where(had, NOW - rng.choice([0, 300, 3600, 6 * HOUR, 30 * HOUR], m), 0)
    for col in ("trial_effect", "trial_low", "trial_high"):
        state[col] = np.where(had & (rng.random(m) < 0.7), rng.choice([-0.3, 0.0, 0.1, 0.4], m), math.nan)
    blocks = int(rng.choice([0, 4, 8]))
    holdback = int(rng.choice([0, 4]))
    evidence = None if rng.random() < 0.15 else EvidenceSettings(trial_blocks=blocks, holdback=holdback)
    level = evidence.level if evidence is not None else 0.9
    keys = list(zip(state["pop"].astype(str), state["prefix"].astype(str), strict=True))
    keys += list(zip(scores["pop"].astype(str), scores["prefix"].astype(str), strict=True))
    trial_effects = {k: _effect(rng, level) for k in keys if rng.random() < 0.6}
    watch_effects = {k: _effect(rng, level) for k in keys if rng.random() < 0.5}
    pins: dict[Key, Pin] = {}
    for k in keys:
        if rng.random() < 0.08:
            algo = str(rng.choice(["bbr", "cubic"]))
            pins[k] = Pin(k[0], k[1], algo, "alice", "ticket", NOW * 10**9 - 3600 * 10**9)
    if rng.random() < 0.3:  # a pin of a prefix with neither scores nor state
        pins[("pop0", "203.0.113.0/24")] = Pin("pop0", "203.0.113.0/24", "bbr", "bob", "", NOW * 10**9)
    cfg = ScoringSettings(
        min_buckets=cfg.min_buckets,
        holdout_fraction=cfg.holdout_fraction,
        max_per_pop=int(rng.choice([0, 1, 3, 10, 1000])),
        max_new_per_round=cfg.max_new_per_round,
        min_hold_seconds=int(rng.choice([0, HOUR, 24 * HOUR])),
        revert_margin=cfg.revert_margin,
    )
    expire = int(rng.choice([HOUR, 7 * 86400]))
    return Case(
        scores,
        state,
        dataclasses.replace(cfg, expire_seconds=expire),  # decide reads it there; the oracle takes it apart
        expire,
        refuse_some if seed % 3 else None,
        evidence,
        trial_effects,
        watch_effects,
        pins,
    )
