"""Per-prefix trials: a randomised switchback schedule and the sequential rule that ends one.
Pure: no I/O.

A newly selected prefix enters a trial: blocks of `trial_block_rounds` buckets come in pairs,
and a pair runs BBR then CUBIC or CUBIC then BBR, chosen by a stable hash of (pop, prefix, trial
start, pair) (a coin flip per pair: time trends and the other traffic of the prefix's
bottleneck hit both arms alike).  A block is counted in buckets that were realized (the
bucket's samples ran the arm, `next_arm`), not in rounds: a toggle held by a rollout in flight
or a mixed bucket just repeats the ask.  The whole prefix
runs one arm at a time, so BBR flows never compete with the same prefix's CUBIC flows inside
an experiment (connection-level A/B is biased: Spang et al., IMC 2021).

Each round the trial's effect (controller/evidence/model.py `trial_effects`, samples attributed
by the socket's own congestion control) is judged once `trial_min_blocks` blocks were realized:

    keep    the interval's lower bound is above zero
    revert  its upper bound is below zero
    limit   `trial_blocks` blocks (half on each arm) were realized, or `max_rounds` rounds
            passed: the settings' `trial_at_limit` decision
    go on   otherwise, with `next_arm`

The rule looks at the data every round, which raises its error rates above the interval's
nominal level; tests/controller/evidence/test_trial_rates.py measures the false-keep and
false-revert rates at the defaults by simulation and docs/report.md states them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from controller.evidence.model import BBR, CUBIC, Effect, pct
from controller.evidence.settings import EvidenceSettings

KEEP, REVERT, GO_ON = "keep", "revert", "go on"


def first_arm(pop: str, prefix: str, since: int, pair: int, salt: str) -> str:
    """The arm of the first block of pair `pair`: a stable coin flip."""
    digest = hashlib.blake2b(f"{salt}|{pop}|{prefix}|{since}|{pair}".encode(), digest_size=1).digest()
    return BBR if digest[0] & 1 else CUBIC


def next_arm(pop: str, prefix: str, since: int, n_bbr: int, n_cubic: int, cfg: EvidenceSettings) -> str:
    """The arm a trial asks for next, from the arm buckets it has realized so far.

    Pair p (p = min(n_bbr, n_cubic) // block_rounds) runs its first arm (a stable coin flip)
    until that arm has (p + 1) blocks, then the other.  The schedule advances on buckets that
    counted, not on rounds: a round whose config was held (a rollout in flight) or whose bucket
    was mixed asks for the same arm again, so every block the rule judges was realized.
    """
    size = cfg.trial_block_rounds
    pair = min(n_bbr, n_cubic) // size
    first = first_arm(pop, prefix, since, pair, cfg.trial_salt)
    have_first = n_bbr if first == BBR else n_cubic
    if have_first < (pair + 1) * size:
        return first
    return CUBIC if first == BBR else BBR


def arm_at(pop: str, prefix: str, since: int, index: int, cfg: EvidenceSettings) -> str:
    """The arm of bucket `index` of a trial in which every ask was realized (each bucket counted
    for the arm `next_arm` asked for): the planned schedule, for simulations and synthetic data."""
    n = {BBR: 0, CUBIC: 0}
    arm = next_arm(pop, prefix, since, 0, 0, cfg)
    for _ in range(index):
        n[arm] += 1
        arm = next_arm(pop, prefix, since, n[BBR], n[CUBIC], cfg)
    return arm


@dataclass(frozen=True)
class Verdict:
    action: str  # KEEP, REVERT or GO_ON
    why: str


def judge(effect: Effect, rounds_done: int, cfg: EvidenceSettings) -> Verdict:
    """The sequential rule (see the module docstring) on the trial's effect so far.

    The blocks are the arm buckets the effect counted (effect.n_a bbr + effect.n_b cubic, in
    units of trial_block_rounds); `rounds_done` (rounds since the trial began) only bounds the
    trial's time: past `max_rounds` it ends at its limit whatever it realized.
    """
    size = cfg.trial_block_rounds
    blocks = (effect.n_a + effect.n_b) // size
    pairs = min(effect.n_a, effect.n_b) // size
    detail = f"effect {effect.text()} over {effect.n_a} bbr / {effect.n_b} cubic buckets"
    if not effect.ok:
        detail = f"effect n/a ({effect.reason})"
    if blocks >= cfg.trial_min_blocks and effect.ok and effect.has_interval:
        if effect.low > 0:
            return Verdict(KEEP, f"trial kept after {blocks} blocks: {detail}, lower bound above 0")
        if effect.high < 0:
            return Verdict(REVERT, f"trial reverted after {blocks} blocks: {detail}, upper bound below 0")
    action = KEEP if cfg.trial_at_limit == KEEP else REVERT
    if pairs * 2 >= cfg.trial_blocks:
        return Verdict(action, f"trial ended at its limit of {cfg.trial_blocks} blocks, inconclusive: {detail}; "
                               f"the settings' decision: {cfg.trial_at_limit}")  # fmt: skip
    if rounds_done >= cfg.max_rounds:
        return Verdict(action, f"trial ran out of time ({rounds_done} rounds, {blocks} of {cfg.trial_blocks} "
                               f"blocks realized), inconclusive: {detail}; the settings' decision: "
                               f"{cfg.trial_at_limit}")  # fmt: skip
    return Verdict(GO_ON, f"trial block {blocks + 1} of at most {cfg.trial_blocks}: {detail}")


def short(effect: Effect) -> str:
    """'+12% [+3%, +22%]' for a table cell."""
    return effect.text() if effect.ok else f"n/a ({effect.reason})"


__all__ = ["GO_ON", "KEEP", "REVERT", "Verdict", "arm_at", "first_arm", "judge", "next_arm", "pct", "short"]
