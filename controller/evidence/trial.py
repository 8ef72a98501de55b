"""Per-prefix trials and the watch of prefixes on BBR: the randomised switchback schedule, the
rule that ends a trial and the rule that reverts a watched prefix.  Pure: no I/O.

A newly selected prefix enters a trial: blocks of `trial_block_rounds` buckets come in pairs,
and a pair runs BBR then CUBIC or CUBIC then BBR, chosen by a stable hash of (pop, prefix, trial
start, pair) (a coin flip per pair: time trends and the other traffic of the prefix's
bottleneck hit both arms alike).  A block is counted in buckets that were realized (the
bucket's samples ran the arm the round asked for), not in rounds: a first BBR ask that waits for
its canary wave, a toggle held by a rollout in flight or a mixed bucket just repeats the ask.
The whole prefix runs one arm at a time, so BBR flows never compete with the same prefix's
CUBIC flows inside an experiment (connection-level A/B is biased: Spang et al., IMC 2021).

Each round the trial's effect (controller/evidence/switchback.py `trial_effect`: realized pairs,
every qualifying sample, concurrent controls, an anytime-valid confidence sequence) is judged
once `trial_min_blocks` blocks were realized in pairs (two alternating pairs at least):

    keep    the sequence's lower bound is above zero
    revert  its upper bound is below zero
    limit   `trial_blocks` blocks were realized in pairs, or `max_rounds` rounds passed:
            inconclusive, the settings' `trial_at_limit` decision (revert: back to CUBIC, and the
            prefix may be selected again after `trial_retry`, not after a revert's cooldown:
            the interval then excludes large effects either way, and CUBIC is the default)
    go on   otherwise, with `next_arm`

The confidence sequence holds at every look, so looking every round does not raise the
false-keep rate above 1 - level (the closed-loop simulation, tests/support/closed_loop.py, measures
it; docs/report.md has the table).

A prefix on BBR (kept by its trial, or selected while trials are off) stays watched: `watch_arm`
puts one bucket of every block of `holdback` on CUBIC at a random place, and `watch_verdict`
reverts it when the watch's interval over its latest blocks lies below -revert_margin.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from controller.evidence.model import BBR, CUBIC, Effect, pct
from controller.evidence.settings import EvidenceSettings
from controller.store.decisions import KEEP, REVERT

GO_ON = "go on"  # a verdict's action: KEEP, REVERT (the decision words) or GO_ON


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


INCONCLUSIVE = "inconclusive"  # the start of the reason of a trial ended at its limit


def judge(effect: Effect, rounds_done: int, cfg: EvidenceSettings) -> Verdict:
    """The sequential rule (see the module docstring) on the trial's effect so far.

    The realized blocks are the buckets the effect counted (effect.n_a bbr, effect.n_b cubic, in
    units of trial_block_rounds); the rule counts them in pairs (a block whose partner has not run
    yet waits).  `rounds_done` (rounds since the trial began) only bounds the trial's time: past
    `max_rounds` it ends at its limit whatever it realized.
    """
    size = cfg.trial_block_rounds
    pairs = min(effect.n_a, effect.n_b) // size
    blocks = 2 * pairs
    detail = f"effect {effect.text()} over {pairs} realized pairs ({effect.samples:,} samples)"
    if not effect.ok:
        detail = f"effect n/a ({effect.reason})"
    if blocks >= cfg.trial_min_blocks and effect.ok and effect.has_interval:
        if effect.low > 0:
            return Verdict(KEEP, f"trial kept after {blocks} realized blocks: {detail}, lower bound above 0")
        if effect.high < 0:
            return Verdict(REVERT, f"trial reverted after {blocks} realized blocks: {detail}, upper bound below 0")
    action = KEEP if cfg.trial_at_limit == KEEP else REVERT
    then = "stays on BBR, watched" if action == KEEP else "back to CUBIC"
    if blocks >= cfg.trial_blocks:
        return Verdict(action, f"{INCONCLUSIVE}: trial reached its limit of {cfg.trial_blocks} realized blocks: "
                               f"{detail}; {then} (--trial-at-limit {cfg.trial_at_limit})")  # fmt: skip
    if rounds_done >= cfg.max_rounds:
        return Verdict(action, f"{INCONCLUSIVE}: trial ran out of time ({rounds_done} rounds, {blocks} of "
                               f"{cfg.trial_blocks} blocks realized in pairs): {detail}; {then} "
                               f"(--trial-at-limit {cfg.trial_at_limit})")  # fmt: skip
    return Verdict(GO_ON, f"trial: {blocks} of at most {cfg.trial_blocks} blocks realized in pairs: {detail}")


def watch_arm(pop: str, prefix: str, since: int, bucket: int, bucket_seconds: int, cfg: EvidenceSettings) -> str:
    """The arm a watched prefix (on BBR since `since`) runs in the bucket starting at `bucket`:
    CUBIC in one bucket of every block of `holdback` buckets, at a stable random place."""
    if cfg.holdback <= 0:
        return BBR
    bs = max(bucket_seconds, 1)
    index = (bucket - (since - since % bs)) // bs
    if index < 0:
        return BBR
    block, place = divmod(index, cfg.holdback)
    digest = hashlib.blake2b(f"{cfg.trial_salt}|watch|{pop}|{prefix}|{since}|{block}".encode(), digest_size=2)
    return CUBIC if int.from_bytes(digest.digest(), "big") % cfg.holdback == place else BBR


def watch_verdict(effect: Effect, revert_margin: float) -> Verdict:
    """Revert a watched prefix when its holdback interval lies below -revert_margin."""
    detail = f"holdback effect {effect.text()} over {effect.n_a} bbr / {effect.n_b} cubic buckets"
    if effect.ok and effect.has_interval and effect.high < -revert_margin:
        return Verdict(REVERT, f"watch: BBR worse than its holdback buckets: {detail}, upper bound below "
                               f"{pct(-revert_margin) if revert_margin else '0'}")  # fmt: skip
    return Verdict(GO_ON, f"watched: {detail}" if effect.ok else f"watched: holdback effect n/a ({effect.reason})")


def short(effect: Effect) -> str:
    """'+12% [+3%, +22%]' for a table cell."""
    return effect.text() if effect.ok else f"n/a ({effect.reason})"


__all__ = [
    "GO_ON",
    "INCONCLUSIVE",
    "KEEP",
    "REVERT",
    "Verdict",
    "arm_at",
    "first_arm",
    "judge",
    "next_arm",
    "pct",
    "short",
    "watch_arm",
    "watch_verdict",
]
