"""Per-prefix trials: a randomised switchback schedule and the sequential rule that ends one.
Pure: no I/O.

A newly selected prefix enters a trial: its rounds are grouped in blocks of
`trial_block_rounds`; blocks come in pairs, and a pair runs BBR then CUBIC or CUBIC then BBR,
chosen by a stable hash of (pop, prefix, trial start, pair) (a coin flip per pair: time
trends and the other traffic of the prefix's bottleneck hit both arms alike).  The whole prefix
runs one arm at a time, so BBR flows never compete with the same prefix's CUBIC flows inside
an experiment (connection-level A/B is biased: Spang et al., IMC 2021).

Each round the trial's effect (controller/evidence/model.py `trial_effects`, samples attributed
by the socket's own congestion control) is judged once `trial_min_blocks` blocks have passed:

    keep    the interval's lower bound is above zero
    revert  its upper bound is below zero
    limit   `trial_blocks` blocks have passed: the settings' `trial_at_limit` decision
    go on   otherwise, with the next block's arm

The rule looks at the data every round, which raises its error rates above the interval's
nominal level; tests/controller/evidence/test_trial_rates.py measures the false-keep and
false-revert rates at the defaults by simulation and docs/report.md states them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from controller.evidence.model import BBR, CUBIC, Effect, pct
from controller.evidence.settings import EvidenceConfig

KEEP, REVERT, GO_ON = "keep", "revert", "go on"


def first_arm(pop: str, prefix: str, since: int, pair: int, salt: str) -> str:
    """The arm of the first block of pair `pair`: a stable coin flip."""
    digest = hashlib.blake2b(f"{salt}|{pop}|{prefix}|{since}|{pair}".encode(), digest_size=1).digest()
    return BBR if digest[0] & 1 else CUBIC


def arm_at(pop: str, prefix: str, since: int, round_index: int, cfg: EvidenceConfig) -> str:
    """The arm of a trial's round `round_index` (0 = the round that started it)."""
    block = round_index // cfg.trial_block_rounds
    first = first_arm(pop, prefix, since, block // 2, cfg.trial_salt)
    if block % 2 == 0:
        return first
    return CUBIC if first == BBR else BBR


@dataclass(frozen=True)
class Verdict:
    action: str  # KEEP, REVERT or GO_ON
    why: str


def judge(effect: Effect, blocks_done: int, cfg: EvidenceConfig) -> Verdict:
    """The sequential rule (see the module docstring) after `blocks_done` whole blocks."""
    detail = f"effect {effect.text()} over {effect.n_a} bbr / {effect.n_b} cubic buckets"
    if not effect.ok:
        detail = f"effect n/a ({effect.reason})"
    if blocks_done >= cfg.trial_min_blocks and effect.ok and effect.has_interval:
        if effect.low > 0:
            return Verdict(KEEP, f"trial kept after {blocks_done} blocks: {detail}, lower bound above 0")
        if effect.high < 0:
            return Verdict(REVERT, f"trial reverted after {blocks_done} blocks: {detail}, upper bound below 0")
    if blocks_done >= cfg.trial_blocks:
        action = KEEP if cfg.trial_at_limit == KEEP else REVERT
        return Verdict(action, f"trial ended at its limit of {cfg.trial_blocks} blocks, inconclusive: {detail}; "
                               f"the settings' decision: {cfg.trial_at_limit}")  # fmt: skip
    return Verdict(GO_ON, f"trial block {blocks_done + 1} of at most {cfg.trial_blocks}: {detail}")


def short(effect: Effect) -> str:
    """'+12% [+3%, +22%]' for a table cell."""
    return effect.text() if effect.ok else f"n/a ({effect.reason})"


__all__ = ["GO_ON", "KEEP", "REVERT", "Verdict", "arm_at", "first_arm", "judge", "pct", "short"]
