"""Run one lab end to end (store, control step, loop) and summarise it; used by `dyncc lab` and
`dyncc demo`.

The summary answers what a person watching the lab wants to know, per path class: how many
prefixes were selected (and from which round), held out, reverted (and why), never selected;
the measured effect of BBR on the treated prefixes against the holdout's change (difference in
differences of the p10 delivery rate and the p10 goodput from the access logs, with a 95 %
bootstrap interval: dyncc/lab/outcomes.py, controller/report/effects.py); the staged
rollout (canary, then the POP) per config version; the routes the edge hosts hold at the end and
the bbr share of new sockets.  `check_options` validates LabOptions (ConfigError, one line)
before anything is built; run_lab calls it first.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from controller.evidence.load import Evidence, SampleRule, recorded_bucket, stored_trials
from controller.evidence.settings import EvidenceSettings
from controller.evidence.summary import KEEP, REVERT, RUNNING, headline_lines, latest
from controller.rollout import records as rollout_records
from controller.scoring.settings import ScoringSettings
from controller.store import Store, open_store
from controller.store.migrate import apply_migrations
from dyncc.lab.control import make_control_factory
from dyncc.lab.loop import STARVED_SHARE, Lab, LabOptions, LabResult, starved_rounds
from dyncc.lab.outcomes import ClassOutcome, RoundView, class_outcomes, phases
from dyncc.lab.table import bbr_count
from dyncc.lab.topology import CLASSES
from dyncc.lab.truth import truth_effects, truth_lines
from dyncc_common.errors import ConfigError
from dyncc_common.names import check_brokers
from dyncc_common.runtime import StopFlag

log = logging.getLogger("dyncc.lab")


@dataclass(frozen=True)
class RunRecord:
    """What a summary needs of one run, live or replayed."""

    classes: dict[str, str]  # prefix -> path class
    pops: dict[str, str]  # prefix -> POP
    hosts: dict[str, list[str]]  # POP -> edge hosts
    rounds: list[RoundView]
    new_sockets: list[dict[str, Counter[str]]]  # per round: prefix -> cc -> new sockets
    bucket_s: int
    scoring: ScoringSettings | None = None  # the rounds' scoring (its sample rule); None: the defaults


@dataclass
class LabSummary:
    headline: str
    classes: dict[str, ClassOutcome] = field(default_factory=dict)
    reverted: list[tuple[str, str, int, str]] = field(default_factory=list)  # pop, prefix, round, reason
    rollout: list[str] = field(default_factory=list)  # one line per POP: the staged waves seen
    routes: dict[str, int] = field(default_factory=dict)  # host -> bbr routes at the end
    bbr_routed: tuple[int, int] = (0, 0)  # (bbr, total) new sockets of prefixes with a bbr route
    bbr_others: tuple[int, int] = (0, 0)
    result: LabResult | None = None  # the live run, when there was one
    evidence: list[str] = field(default_factory=list)  # the effect model's headline (as the report's)
    rollbacks: list[str] | None = None  # one line per rollback of a wave (None: the store was not read)
    truth: list[str] = field(default_factory=list)  # the run's ground truth per class (dyncc/lab/truth.py)
    polling: str = ""  # polls per bucket against the plan; says when the run was starved
    example_at: str = ""  # the last round's time (ISO, UTC): explain's --at for `example`
    example: tuple[str, str] | None = None  # (POP, prefix) worth an explain: the first trialled
    footer: list[str] = field(default_factory=list)

    def summary_text(self) -> str:
        lines = [self.headline]
        if self.polling:
            lines.append(self.polling)
        lines.append(
            f"{'class':<12} {'prefixes':>8} {'trialled':>8} {'first':>5} {'kept':>4} {'reverted':>8} "
            f"{'running':>7} {'holdout':>7}  {'p10 delivery rate, BBR vs CUBIC':<44}  p10 goodput"
        )
        for klass in CLASSES:
            c = self.classes.get(klass)
            if c is None:
                continue
            first = f"r{c.first_selected_round}" if c.first_selected_round else "-"
            cells = [
                f"{klass:<12} {c.prefixes:>8} {c.selected:>8} {first:>5} {c.kept:>4} {c.reverted:>8} "
                f"{c.running:>7} {c.holdout:>7}",
                f"{_effect(c.effects.get('delivery')):<44}",
                _effect(c.effects.get("goodput")),
            ]
            lines.append("  ".join(cells).rstrip())
        lines.append(
            "(per class: the prefixes' trials pooled, random effects, 90% interval; (prefixes, buckets bbr/cubic "
            "per prefix pooled); the truth lines below measure each class in this run; production has none)"
        )
        for pop, prefix, round_no, reason in self.reverted[:6]:
            lines.append(f"reverted {prefix} ({pop}, round {round_no}): {reason}")
        if len(self.reverted) > 6:
            lines.append(f"... and {len(self.reverted) - 6} more reverted")
        lines += self.truth
        lines += [f"rollout {line}" for line in self.rollout]
        if self.rollbacks is not None:
            lines += self.rollbacks or ["rollbacks: none (no canary or POP-wide wave was rolled back)"]
        lines.append("bbr routes at the end: " + (", ".join(f"{h} {n}" for h, n in self.routes.items()) or "none"))
        lines.append(
            f"bbr on new sockets: prefixes with a bbr route {_share(self.bbr_routed)}, others {_share(self.bbr_others)}"
        )
        lines += self.evidence
        return "\n".join(lines + self.footer)


def _effect(effect: Any) -> str:
    """'+85% [+60%, +110%] (9 prefixes)' or why there is none."""
    if effect is None:
        return "-"
    if not effect.ok:
        return f"n/a: {effect.reason}"[:44]
    return f"{effect.text()} ({effect.prefixes} prefixes)"


def _share(pair: tuple[int, int]) -> str:
    bbr, total = pair
    return f"{bbr}/{total} ({bbr / total * 100:.0f}%)" if total else "no new sockets"


def live_record(result: LabResult, scoring: ScoringSettings | None = None) -> RunRecord:
    """The run as the summary reads it; the ground-truth references are the lab's, not the
    controller's: they are left out of the classes."""
    topo = result.topology
    references = {r.prefix for r in result.references}
    rounds = [RoundView(r.round_no, int(r.round_time.timestamp()), r.outcome) for r in result.rounds]
    bucket = 0
    if len(result.rounds) > 1:
        span = (result.rounds[-1].round_time - result.rounds[0].round_time).total_seconds()
        bucket = int(span) // (len(result.rounds) - 1)
    return RunRecord(
        {p: k for p, k in topo.classes().items() if p not in references},
        topo.prefix_pops(),
        {pop: [e.host for e in topo.edges_of(pop)] for pop in topo.pops},
        rounds,
        [r.new_sockets for r in result.rounds],
        bucket or 1,
        scoring,
    )


def summarize(result: LabResult, store: Store | None = None, opts: LabOptions | None = None) -> LabSummary:
    """The live run's summary (effects when `store` is given; the ground truth with `opts` too)."""
    topo = result.topology
    headline = (
        f"lab {topo.run_id}: {len(result.rounds)} rounds, {len(topo.pops)} POPs x "
        f"{len(topo.edges) // max(len(topo.pops), 1)} edge hosts, {len(topo.prefixes)} client prefixes, "
        f"{result.polls} polls, {result.rows} socket samples, {result.requests} HTTP requests"
        + (f", stopped by {result.stopped_by}" if result.stopped_by else "")
    )
    evidence = opts.scoring.evidence_settings() if opts is not None else EvidenceSettings()
    scoring = opts.scoring.scoring_settings(opts.round_seconds) if opts is not None else None
    summary = summarize_run(live_record(result, scoring), headline, store, evidence)
    summary.result = result
    summary.polling = polling_line(result)
    if store is not None and opts is not None and opts.references:
        summary.truth = _truth(store, result, opts, evidence)
    summary.footer.append("namespaces left: " + (" ".join(result.leftover_namespaces) or "none"))
    return summary


def polling_line(result: LabResult) -> str:
    """'polls per bucket: median 29 [22, 30] of 30 planned' and, when a quarter of the buckets or
    more got under STARVED_SHARE of the plan, that the run was starved."""
    polls = sorted(r.polls for r in result.rounds)
    if not polls or not result.planned_polls:
        return ""
    median = polls[len(polls) // 2] if len(polls) % 2 else (polls[len(polls) // 2 - 1] + polls[len(polls) // 2]) / 2
    starved = starved_rounds(result)
    text = f"polls per bucket: median {median:g} [{polls[0]}, {polls[-1]}] of {result.planned_polls} planned"
    if len(starved) * 4 >= len(polls):
        share = f"{STARVED_SHARE * 100:.0f}%"
        return text + (
            f"; STARVED: {len(starved)} of {len(polls)} buckets got under {share} of their polls (the CPU is "
            "short: the trials' verdicts rest on fewer samples than planned)"
        )
    return text + (f"; {len(starved)} starved buckets" if starved else "")


def _truth(store: Store, result: LabResult, opts: LabOptions, cfg: EvidenceSettings) -> list[str]:
    """The ground-truth lines (dyncc/lab/truth.py), from the store the run wrote."""
    if not result.rounds:
        return []
    scoring = opts.scoring.scoring_settings(opts.round_seconds)
    until = int(result.rounds[-1].round_time.timestamp())
    try:
        rule = SampleRule.of(scoring)
        effects = truth_effects(store, cfg, rule, result.references, result.reference_schedule, until)
    except Exception as exc:  # the summary must not fail the run
        log.warning("lab summary: ground truth not computed: %s", exc)
        return [f"ground truth: not computed ({str(exc)[:100]})"]
    return truth_lines(effects, result.references, result.reference_failures)


def summarize_run(
    run: RunRecord, headline: str, store: Store | None = None, evidence: EvidenceSettings | None = None
) -> LabSummary:
    """Per-class outcomes (effects when `store` is given), staged waves, routes and bbr shares."""
    summary = LabSummary(headline)
    if not run.rounds:
        return summary
    prefix_phases = phases(run.rounds, run.classes, run.pops, run.hosts, run.bucket_s)
    summary.classes = class_outcomes(prefix_phases)
    summary.reverted = sorted(
        (ph.pop, ph.prefix, ph.reverted_round, ph.reason) for ph in prefix_phases.values() if ph.reverted_round
    )
    treated = sorted((ph.selected_round, ph.pop, ph.prefix) for ph in prefix_phases.values() if ph.selected_round)
    if treated:
        summary.example = treated[0][1:]
        summary.example_at = f"{dt.datetime.fromtimestamp(run.rounds[-1].end_s, dt.UTC):%Y-%m-%dT%H:%M:%SZ}"
    if store is not None:
        _evidence(store, summary, run, evidence or EvidenceSettings())
        summary.rollbacks = _rollbacks(store, run)
    summary.rollout = _waves(run)
    last = run.rounds[-1].outcome.routes
    summary.routes = {host: sum(1 for cc in routes.values() if cc == "bbr") for host, routes in sorted(last.items())}
    routed, others = Counter[str](), Counter[str]()
    previous: dict[str, dict[str, str]] = {}
    for view, new in zip(run.rounds, run.new_sockets, strict=True):
        # a round's new sockets met the routes installed at the end of the previous round
        for prefix, counts in new.items():
            if prefix not in run.classes:  # a ground-truth reference: the lab's routes, not the controller's
                continue
            hosts = run.hosts.get(run.pops.get(prefix, ""), [])
            any_bbr = any(previous.get(h, {}).get(prefix) == "bbr" for h in hosts)
            (routed if any_bbr else others).update(counts)
        previous = view.outcome.routes
    summary.bbr_routed, summary.bbr_others = bbr_count(routed), bbr_count(others)
    return summary


def evidence_bucket(store: Store, run: RunRecord) -> int:
    """The bucket length the summary judges the trials on: what the run's rounds recorded
    (round_settings, read as the report reads it: controller/evidence/load.py recorded_bucket),
    else the run's own bucket (run.bucket_s, which the lab's controller records)."""
    start = dt.datetime.fromtimestamp(run.rounds[0].end_s, dt.UTC)
    end = dt.datetime.fromtimestamp(run.rounds[-1].end_s + 1, dt.UTC)
    recorded = recorded_bucket(store, "", start, end)
    if recorded is None:
        return run.bucket_s
    if recorded != run.bucket_s:
        log.warning(
            "lab summary: the rounds recorded %d s buckets, the run %d s: using the recorded", recorded, run.bucket_s
        )
    return recorded


def summary_rule(store: Store, run: RunRecord) -> SampleRule:
    """The samples the summary counts: the run's rounds' own rule (their min bytes and app-limited
    setting) on the bucket they recorded (evidence_bucket)."""
    return SampleRule.of(run.scoring or ScoringSettings(), bucket_seconds=evidence_bucket(store, run))


def _evidence(store: Store, summary: LabSummary, run: RunRecord, cfg: EvidenceSettings) -> None:
    """Per class and overall: the trials' pooled effects, from the stored samples and decisions
    (controller/evidence: the same figures as the report and the controller's own decisions)."""
    last = run.rounds[-1].end_s
    try:
        trials = stored_trials(store, dt.datetime.fromtimestamp(last + 1, dt.UTC))
        ev = Evidence.for_window(store, cfg, summary_rule(store, run), trials, last)
    except Exception as exc:  # the summary must not fail the run
        log.warning("lab summary: effects not computed: %s", exc)
        return
    for klass, c in summary.classes.items():
        mine = [t for t in trials if run.classes.get(t.prefix) == klass]
        last_trials = latest(mine)
        c.kept = sum(t.outcome == KEEP for t in last_trials)
        c.running = sum(t.outcome == RUNNING for t in last_trials)
        c.trial_reverted = sum(t.outcome == REVERT for t in last_trials)
        if mine:
            c.effects["delivery"] = ev.pooled(mine)
            c.effects["goodput"] = ev.pooled(mine, "goodput")
    summary.evidence = headline_lines(ev)


def _rollbacks(store: Store, run: RunRecord) -> list[str] | None:
    """One line per rollback the staged rollout made during the run (controller/rollout/engine.py:
    a canary that failed its gate, or a POP-wide wave with a failing host), with the round it
    happened in; None when the store could not say."""
    since_s = run.rounds[0].end_s - run.bucket_s
    try:
        rows = rollout_records.rollbacks(store, since_s * 10**9, (run.rounds[-1].end_s + 1) * 10**9)
    except Exception as exc:  # the summary must not fail the run
        log.warning("lab summary: rollbacks not read: %s", exc)
        return None
    lines = []
    for row in rows:
        at_s = row.updated_ns // 10**9
        round_no = max((r.round_no for r in run.rounds if r.end_s <= at_s), default=run.rounds[0].round_no)
        if row.event == "rollback":
            lines.append(
                f"rolled back {row.pop} v{row.candidate_version} (round {round_no}): {row.reason}; "
                f"v{row.wave_version} re-published the stable entries POP-wide"
            )
        else:
            lines.append(f"rollback of {row.pop} v{row.candidate_version} rejected (round {round_no}): {row.reason}")
    return lines


def _waves(run: RunRecord) -> list[str]:
    """Per POP: the bbr prefixes grouped by how they reached the hosts, each group with the round
    its first hosts held them on bbr and the round every host of the POP did (the canary wave,
    then the POP); see rollout_waves."""
    lines = []
    for pop, pop_hosts in sorted(run.hosts.items()):
        rounds = [(view.round_no, view.outcome.routes) for view in run.rounds]
        waves = rollout_waves(rounds, pop_hosts)
        lines.append(f"{pop}: " + ("; ".join(waves) if waves else "no bbr routes"))
    return lines


def rollout_waves(rounds: list[tuple[int, dict[str, dict[str, str]]]], pop_hosts: list[str]) -> list[str]:
    """Pure: per prefix that any of pop_hosts held on bbr, the first round (and the hosts) it was
    on bbr and the first round from then on that every host held it; prefixes with the same
    story are one group ("N prefixes: round R on H, round R2 on all K hosts"). A prefix is judged
    on its own, so trial toggles of other prefixes never split a wave."""
    first: dict[str, tuple[int, frozenset[str]]] = {}
    everyone: dict[str, int] = {}
    for round_no, routes in rounds:
        on = {h: {p for p, cc in routes.get(h, {}).items() if cc == "bbr"} for h in pop_hosts}
        for prefix in sorted(set().union(*on.values())) if on else []:
            holders = frozenset(h for h in pop_hosts if prefix in on[h])
            first.setdefault(prefix, (round_no, holders))
            if prefix not in everyone and holders >= set(pop_hosts):
                everyone[prefix] = round_no
    groups: dict[tuple[int, frozenset[str], int], int] = {}
    for prefix, (round_no, holders) in first.items():
        key = (round_no, holders, everyone.get(prefix, 0))
        groups[key] = groups.get(key, 0) + 1
    waves = []
    for (round_no, holders, all_round), n in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][2])):
        text = f"{n} prefixes: round {round_no} on {', '.join(sorted(holders))}"
        if all_round and all_round != round_no:
            text += f", round {all_round} on all {len(pop_hosts)} hosts"
        waves.append(text)
    return waves


def check_options(opts: LabOptions) -> None:
    """ConfigError (one line) for options the lab would only trip over after building namespaces."""
    if opts.kafka is not None:
        check_brokers(opts.kafka, "--kafka")
    if not opts.run_id.isalnum() or len(opts.run_id) > 8:
        raise ConfigError(f"bad --run-id {opts.run_id!r}: 1-8 letters or digits")
    if opts.record is not None:
        record = Path(opts.record)
        if record.is_dir():
            raise ConfigError(f"bad --record {record}: a directory, give a file name")
        if not record.parent.is_dir() or not os.access(record.parent, os.W_OK | os.X_OK):
            raise ConfigError(f"bad --record {record}: directory {record.parent} missing or not writable")


def open_lab_store(url: str) -> Store:
    store = open_store(url)
    apply_migrations(store)
    return store


def run_lab(opts: LabOptions, url: str, workdir: Path, stop: StopFlag, out: TextIO | None = None) -> LabSummary:
    """Check the options, open the store, run the lab with Ctrl-C/SIGTERM handling, and summarise."""
    check_options(opts)
    store = open_lab_store(url)
    log.info("lab store %s", store.url.redacted())
    lab = Lab(opts, store, make_control_factory(workdir), workdir, out=out)
    with stop.installed():
        result = lab.run(stop)
    summary = summarize(result, store, opts)
    if opts.enforce == "bpf":
        summary.footer.append(
            "enforce bpf: selected prefixes' connections start on cubic and switch after the config's "
            "threshold, so 'bbr on new sockets' (first sightings) stays low; docs/enforce.md shows how to see "
            "the switched ones"
        )
    return summary
