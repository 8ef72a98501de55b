"""The evidence headline: the few lines every summary of a run starts with (the lab's terminal
summary and the report's headline), built from one `Evidence` so the same
store and window print the same figures everywhere.  Pure text from the effect model.

"In force" are the prefixes whose latest trial ended keep and that are still on BBR (no later
revert for no traffic or a denial): what BBR does for the prefixes on it now.  That pool is
chosen by its own outcome, so it leans positive; the pool over every trial (kept, reverted,
running) is the unbiased estimate of what a trial finds, and both are shown.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from controller.evidence.load import Evidence, Trial
from controller.evidence.model import Effect, summary_line
from controller.store.decisions import KEEP, REVERT, TRIAL

RUNNING = TRIAL  # a trial still going on


def latest(trials: Sequence[Trial]) -> list[Trial]:
    """Each prefix's latest trial."""
    out: dict[tuple[str, str], Trial] = {}
    for t in sorted(trials, key=lambda t: t.since):
        out[t.key] = t
    return list(out.values())


def in_force(trials: Sequence[Trial]) -> list[Trial]:
    """Each prefix's latest trial when it ended keep and the prefix is still on BBR."""
    return [t for t in latest(trials) if t.in_force]


def counts(trials: Sequence[Trial]) -> dict[str, int]:
    last = latest(trials)
    return {
        "trials": len(trials),
        "prefixes": len(last),
        KEEP: sum(t.outcome == KEEP for t in last),
        REVERT: sum(t.outcome == REVERT for t in last),
        RUNNING: sum(t.outcome == RUNNING for t in last),
    }


def pools(ev: Evidence) -> dict[str, Effect]:
    """The four pooled effects of a headline: delivery rate and goodput, in force and all trials."""
    force = in_force(ev.trials)
    return {
        "delivery in force": ev.pooled(force),
        "delivery all trials": ev.pooled(ev.trials),
        "goodput in force": ev.pooled(force, "goodput"),
        "goodput all trials": ev.pooled(ev.trials, "goodput"),
    }


def headline_lines(ev: Evidence) -> list[str]:
    """The headline's lines (see the module docstring)."""
    n = counts(ev.trials)
    p = pools(ev)
    share = ev.app_limited_share()
    lines = [
        f"trials: {n['trials']} on {n['prefixes']} prefixes: {n[KEEP]} kept (in force on BBR), "
        f"{n[REVERT]} reverted, {n[RUNNING]} running",
        summary_line("BBR effect on p10 delivery rate, prefixes in force", p["delivery in force"]),
        summary_line("BBR effect on p10 delivery rate, all trials", p["delivery all trials"]),
        summary_line("BBR effect on p10 goodput (access logs), prefixes in force", p["goodput in force"]),
        summary_line("BBR effect on p10 goodput (access logs), all trials", p["goodput all trials"]),
        "app-limited samples left out of the trials: "
        + ("none read" if not math.isfinite(share) else f"{share:.0%} of qualifying samples"),
    ]
    return lines
