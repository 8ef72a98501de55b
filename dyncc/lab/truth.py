"""The lab's ground truth, measured inside the run: what BBR does to each path class now, on this
machine, whatever else the machine is doing.

Per (POP, path class) of at least MIN_CLASS_PREFIXES prefixes, its last prefix is a *reference*:
the controller never moves it (the lab pins it to cubic through the operator's own pins,
controller/scoring/pins.py, so it is decided `pin` and stays out of every config) and the lab
switches it itself between BBR and CUBIC every BLOCK_ROUNDS rounds, on every edge host of its POP,
with routes of its own protocol (REFERENCE_PROTO, beside the agents' 250, which they never touch).
The POPs run opposite phases, so in every bucket one reference of a class is on each arm.  The
truth of a class is the one effect model's (controller/evidence/switchback.py trial_effect: the
same cells, purity, controls and pairs as a trial, the lab's schedule as the asked arms), pooled
over the class's references (controller/evidence/model.py pooled): an interval with its
prefixes and samples, never a point alone.

Pure: `pick_references`, `reference_arm`, `route_batch`, `parse_routes`; I/O: `ReferenceRoutes`
(ip -batch in the edge namespaces, every route read back) and `truth_effects` (the store).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from controller.evidence.load import SampleRule, arm_cells, pop_control_cells
from controller.evidence.model import BBR, CUBIC, Effect, none, pooled
from controller.evidence.switchback import series_of, trial_effect
from dyncc.lab.topology import CLASSES, EdgeHost, Topology, TopologyError, run_cmd

if TYPE_CHECKING:
    from controller.evidence.settings import EvidenceSettings
    from controller.store import Store

log = logging.getLogger("dyncc.lab")

__all__ = [
    "BLOCK_ROUNDS",
    "REFERENCE_PROTO",
    "Reference",
    "ReferenceRoutes",
    "parse_routes",
    "pick_references",
    "reference_arm",
    "route_batch",
    "truth_effects",
    "truth_lines",
]

REFERENCE_PROTO = 251  # the lab's reference routes; the agents own 250 (dyncc/lab/agent.py LAB_PROTO)
BLOCK_ROUNDS = 2  # rounds per arm: the second bucket of a block is wholly on its arm
MIN_CLASS_PREFIXES = 3  # a smaller (POP, class) keeps every prefix for the controller
PIN_WHO = "dyncc lab"
PIN_WHY = "ground-truth reference: the lab switches it between bbr and cubic itself"


@dataclass(frozen=True)
class Reference:
    pop: str
    prefix: str
    klass: str
    family: int
    phase: int  # 0: BBR in the first block, 1: CUBIC


def pick_references(topo: Topology, enabled: bool = True) -> list[Reference]:
    """The last prefix of each (POP, class) with at least MIN_CLASS_PREFIXES prefixes; the i-th POP
    starts on BBR when i is even."""
    if not enabled:
        return []
    out = []
    for i, pop in enumerate(topo.pops):
        for klass in CLASSES:
            mine = [p for p in topo.prefixes if p.pop == pop and p.klass == klass]
            if len(mine) >= MIN_CLASS_PREFIXES:
                p = mine[-1]
                out.append(Reference(pop, p.prefix, klass, p.family, i % 2))
    return out


def reference_arm(ref: Reference, round_no: int) -> str:
    """The arm the lab gives `ref` from round `round_no` (1-based) on, for the bucket after it."""
    block = (max(round_no, 1) - 1) // BLOCK_ROUNDS
    return BBR if (block + ref.phase) % 2 == 0 else CUBIC


def route_batch(refs: Sequence[Reference], edge: EdgeHost, round_no: int) -> list[str]:
    """`ip -batch` lines that put each of the edge's POP's references on its arm for the round."""
    lines = []
    for ref in refs:
        if ref.pop != edge.pop:
            continue
        via = edge.link.router_v4 if ref.family == 4 else edge.link.router_v6
        arm = reference_arm(ref, round_no)
        lines.append(f"route replace {ref.prefix} via {via} dev eth0 proto {REFERENCE_PROTO} congctl {arm}")
    return lines


def parse_routes(text: str) -> dict[str, str]:
    """`ip route show proto N` (either family) -> canonical prefix -> congctl ('' without one)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        try:
            net = ipaddress.ip_network(words[0], strict=False)
        except ValueError:
            continue
        cc = words[words.index("congctl") + 1] if "congctl" in words[:-1] else ""
        if cc == "lock" and "congctl" in words:  # `congctl lock bbr`
            i = words.index("congctl")
            cc = words[i + 2] if i + 2 < len(words) else ""
        out[str(net)] = cc
    return out


class ReferenceRoutes:
    """Installs the references' arm of each round on every edge host of their POP and reads it back;
    `schedule` holds, per reference, the round boundary (Unix s) -> the arm installed from it."""

    def __init__(self, topo: Topology, refs: Sequence[Reference]) -> None:
        self.topo = topo
        self.refs = list(refs)
        self.schedule: dict[tuple[str, str], dict[int, str]] = {(r.pop, r.prefix): {} for r in self.refs}
        self.failures = 0

    def apply(self, round_no: int, boundary: int) -> None:
        """Install round `round_no`'s arms; a host whose routes do not read back as asked is logged
        and counted, and its references' bucket is not scheduled (the effect model leaves it out)."""
        if not self.refs:
            return
        ok = {key: True for key in self.schedule}
        for edge in self.topo.edges:
            lines = route_batch(self.refs, edge, round_no)
            if not lines:
                continue
            mine = [r for r in self.refs if r.pop == edge.pop]
            try:
                run_cmd(["ip", "-n", edge.ns, "-batch", "-"], input_text="\n".join(lines) + "\n")
                shown = parse_routes(
                    run_cmd(["ip", "-n", edge.ns, "-4", "route", "show", "proto", str(REFERENCE_PROTO)])
                    + run_cmd(["ip", "-n", edge.ns, "-6", "route", "show", "proto", str(REFERENCE_PROTO)])
                )
            except TopologyError as exc:
                log.warning("lab references on %s: %s", edge.host, exc)
                shown = {}
            for r in mine:
                if shown.get(r.prefix) != reference_arm(r, round_no):
                    ok[(r.pop, r.prefix)] = False
        for r in self.refs:
            if ok[(r.pop, r.prefix)]:
                self.schedule[(r.pop, r.prefix)][boundary] = reference_arm(r, round_no)
            else:
                self.failures += 1
                log.warning("lab reference %s (%s): round %d's arm not on every host", r.prefix, r.pop, round_no)


def truth_effects(
    store: Store,
    cfg: EvidenceSettings,
    rule: SampleRule,
    refs: Sequence[Reference],
    schedule: Mapping[tuple[str, str], Mapping[int, str]],
    until: int,
) -> dict[str, Effect]:
    """Per class: the references' effects (the lab's schedule as the asked arms, the samples `rule`
    counts: the rounds' own) pooled; classes without a reference are absent."""
    bucket_seconds, min_bytes, include_app_limited = rule.bucket_seconds, rule.min_bytes, rule.include_app_limited
    starts = [min(schedule.get((r.pop, r.prefix), {}) or [until]) for r in refs]
    if not refs:
        return {}
    start = min(starts)
    keys = [(r.pop, r.prefix) for r in refs]
    cells = arm_cells(store, keys, start, until, bucket_seconds, min_bytes, include_app_limited)
    controls = (
        pop_control_cells(store, {r.pop for r in refs}, start, until, bucket_seconds, min_bytes,
                          cfg.min_arm_samples, include_app_limited)
        if cfg.controls else {}
    )  # fmt: skip
    series = series_of(cells, cfg)
    per_class: dict[str, list[Effect]] = {}
    for r, since in zip(refs, starts, strict=True):
        asked = dict(schedule.get((r.pop, r.prefix), {}))
        effect = (
            trial_effect(series.get((r.pop, r.prefix)), since, until, asked, controls.get(r.pop), cfg, bucket_seconds)
            if asked
            else none("no round put it on an arm", cfg.level)
        )
        per_class.setdefault(r.klass, []).append(effect)
    return {k: pooled(v, cfg.level, trials=len(v)) for k, v in per_class.items()}


def truth_lines(effects: Mapping[str, Effect], refs: Sequence[Reference], failures: int = 0) -> list[str]:
    """The summary's lines: one per class with a reference, in CLASSES order."""
    if not refs:
        return ["ground truth: no references (no POP has a class of 3 prefixes or more)"]
    lines = [
        f"ground truth (this run: {len(refs)} reference prefixes the lab switched between bbr and cubic every "
        f"{BLOCK_ROUNDS} rounds; p10 delivery rate, BBR vs CUBIC, 90% interval):"
    ]
    for klass in CLASSES:
        e = effects.get(klass)
        if e is None:
            continue
        if not e.ok:
            lines.append(f"  truth {klass:<12} n/a: {e.reason} ({e.samples:,} samples)")
        else:
            lines.append(f"  truth {klass:<12} {e.text()}, {e.prefixes} prefixes, {e.samples:,} samples")
    if failures:
        lines.append(f"  ({failures} reference buckets left out: their route was not in force on every host)")
    return lines
