"""The fleet lab's orchestration: network up, paths shaped, web servers and clients on, then per
accelerated round: alternating paths flip -> telemetry loaded -> access logs loaded -> scoring ->
staged publish -> agents -> table; and everything torn down.

Rounds follow wall-clock buckets of `round_seconds` (the scoring bucket), so a round's telemetry
is exactly one bucket.  The collectors poll from a thread of their own every `poll_interval`
(writes queued: TelemetryPipeline.start_writer), so a round that takes seconds of a busy CPU
does not stop the polls; each round records how many polls its bucket got (a bucket with less
than STARVED_SHARE of the planned polls is starved, and the summary says so).  The ground-truth
references (dyncc/lab/truth.py) are pinned before the first round and switched after each
round's control step.  The clients first run one to two rounds unpolled (warm-up), so round 1
measures a whole bucket of clients past their start.  At each boundary: alternating paths flip,
the pipeline confirms every polled batch is in the store, each edge host's new access-log lines
are loaded, the control step scores the window that just closed and (through the publisher and
the edge agents) installs routes, and one table row per (POP, path class) is printed.  Whatever happens (error, Ctrl-C,
SIGTERM via StopFlag), the clients, web servers and delay relay stop and every namespace of the
run is deleted.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

from controller.scoring.pins import PIN, write_pin
from controller.store import Store
from controller.store.decisions import HOLDOUT, KEEP, REVERT, SELECT, TRIAL
from dyncc.lab import table as lab_table
from dyncc.lab import topology as lab_topology
from dyncc.lab.model import ControlOutcome, LabScoring, PrefixScore
from dyncc.lab.pipeline import EdgeSource, TelemetryPipeline
from dyncc.lab.services import LabServices
from dyncc.lab.settings import LabSettings
from dyncc.lab.truth import PIN_WHO, PIN_WHY, Reference, ReferenceRoutes, pick_references
from dyncc_common.kafka_security import KafkaSecurity, librdkafka_options
from dyncc_common.runtime import StopFlag

log = logging.getLogger("dyncc.lab")

STARVED_SHARE = 0.5  # a bucket with fewer polls than this share of the planned ones is starved

__all__ = ["ControlOutcome", "Lab", "LabOptions", "LabResult", "PrefixScore", "RoundControl", "threshold_for"]


@dataclass
class LabOptions:
    """What the lab runs (dyncc.lab.cli.options_from_settings builds it; defaults: LabSettings')."""

    round_seconds: int = LabSettings.round_seconds
    rounds: int = LabSettings.rounds  # 0: until `duration` (or stopped)
    duration: float = 0.0  # seconds; 0 with rounds 0: until stopped (LabSettings: None)
    poll_interval: float = LabSettings.poll_interval
    layout: lab_topology.Layout = field(default_factory=lab_topology.Layout)
    scoring: LabScoring = field(default_factory=LabScoring)
    think_time: float = LabSettings.think_time  # mean seconds between a client's requests
    kafka: str | None = LabSettings.kafka
    kafka_security: KafkaSecurity = field(default_factory=KafkaSecurity)  # TLS / SASL of `kafka`
    enforce: str = LabSettings.enforce  # the edge agents' enforcement: route or bpf (collector.agent.settings)
    record: Path | None = LabSettings.record  # telemetry recording; access logs go beside it
    references: bool = LabSettings.references  # ground-truth references (dyncc/lab/truth.py)
    run_id: str = field(default_factory=lambda: secrets.token_hex(2))

    def planned_polls(self) -> int:
        """Polls a bucket gets when the CPU keeps up."""
        return max(int(self.round_seconds / self.poll_interval), 1)

    def planned_rounds(self) -> int:
        if self.rounds:
            return self.rounds
        if self.duration:
            return max(int(self.duration // self.round_seconds), 1)
        return 0


def threshold_for(topo: lab_topology.Topology) -> float:
    """A threshold quantile just above the share of prefixes on a poor path in a round (per POP).

    ClickHouse's quantileExact(q) over n values is the value at index floor(q * n); a prefix is
    bad when below it, so floor(q * n) should cover the prefixes shaped in a round.
    """
    prefixes = [p for p in topo.prefixes if p.pop == topo.pops[0]]
    n = len(prefixes)
    slow = sum(1 for p in prefixes if p.slow_in_round(0))
    return min((slow + 0.5) / n, 0.95) if n else 0.2


class RoundControl(Protocol):
    """Scoring + publishing + the edge agents, one call per round."""

    def round(self, round_time: dt.datetime, round_no: int) -> ControlOutcome: ...

    def close(self) -> None: ...


@dataclass
class RoundRecord:
    round_no: int
    round_time: dt.datetime
    header: lab_table.RoundHeader
    rows: list[lab_table.ClassRow]
    outcome: ControlOutcome
    new_sockets: dict[str, Counter[str]]
    polls: int = 0  # polls in the round's bucket


@dataclass
class LabResult:
    topology: lab_topology.Topology
    rounds: list[RoundRecord] = field(default_factory=list)
    polls: int = 0
    rows: int = 0
    requests: int = 0  # access-log rows loaded
    stopped_by: str = ""
    leftover_namespaces: list[str] = field(default_factory=list)
    first_selected: dict[str, int] = field(default_factory=dict)  # prefix -> round first selected
    reverted: dict[str, tuple[int, str]] = field(default_factory=dict)  # prefix -> (round, reason)
    errors: list[str] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)  # the ground truth's prefixes
    reference_schedule: dict[tuple[str, str], dict[int, str]] = field(default_factory=dict)  # bucket -> arm
    reference_failures: int = 0
    planned_polls: int = 0  # per bucket


def starved_rounds(result: LabResult) -> list[int]:
    """The rounds whose bucket got fewer than STARVED_SHARE of the planned polls."""
    floor = STARVED_SHARE * result.planned_polls
    return [r.round_no for r in result.rounds if r.polls < floor]


def class_rows(
    topo: lab_topology.Topology, outcome: ControlOutcome, new: dict[str, Counter[str]]
) -> list[lab_table.ClassRow]:
    """One row per (POP, class): decisions, bbr routes per edge host, new sockets' cc."""
    rows: dict[tuple[str, str], lab_table.ClassRow] = {}
    for c in topo.clients:
        row = rows.setdefault((c.pop, c.klass), lab_table.ClassRow(c.pop, c.klass))
        hosts = [e.host for e in topo.edges_of(c.pop)]
        if not row.routes:
            row.routes = [0] * len(hosts)
        for p in c.prefixes:
            row.prefixes += 1
            s = outcome.scores.get(p.prefix)
            if s is not None and s.counted_buckets > 0:
                row.scored += 1
            if s is not None:
                row.decisions[s.decision] += 1
            for i, host in enumerate(hosts):
                if outcome.routes.get(host, {}).get(p.prefix) == "bbr":
                    row.routes[i] += 1
            row.new_sockets.update(new.get(p.prefix, {}))
    return list(rows.values())


class Lab:
    """One lab run; `run()` always tears down what it built."""

    def __init__(
        self,
        opts: LabOptions,
        store: Store,
        make_control: Callable[[Store, lab_topology.Topology, LabOptions], RoundControl],
        workdir: Path,
        out: TextIO | None = None,
    ) -> None:
        self.opts = opts
        self.store = store
        self.make_control = make_control
        self.workdir = workdir
        self.out = out or sys.stdout
        self.topo = lab_topology.describe(opts.run_id, opts.layout)

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def run(self, stop: StopFlag) -> LabResult:
        opts, topo = self.opts, self.topo
        result = LabResult(topo)
        services = LabServices(topo, self.workdir, self.store, think_time=opts.think_time)
        pipeline: TelemetryPipeline | None = None
        control: RoundControl | None = None
        references: ReferenceRoutes | None = None
        meta: dict[str, Any] = {}
        try:
            lab_topology.build(topo)
            services.start()
            pipeline = TelemetryPipeline(
                self.store,
                [EdgeSource(e.host, e.pop, e.ns) for e in topo.edges],
                kafka=opts.kafka,
                kafka_options=librdkafka_options(opts.kafka_security) if opts.kafka else {},
                topic=f"dyncc-lab-{opts.run_id}-tcpinfo",
                record=opts.record,
            )
            pipeline.start_writer()
            control = self.make_control(self.store, topo, opts)
            result.references = pick_references(topo, opts.references)
            result.planned_polls = opts.planned_polls()
            for ref in result.references:  # the controller leaves them alone: a cubic pin is in no config
                write_pin(self.store, ref.pop, ref.prefix, PIN, "cubic", PIN_WHO, PIN_WHY)
            references = ReferenceRoutes(topo, result.references)
            meta = self._meta()
            self._loop(stop, result, services, pipeline, control, references)
        finally:
            if references is not None:
                result.reference_schedule, result.reference_failures = references.schedule, references.failures
            if stop.is_set():
                result.stopped_by = stop.signal_name or "stop"
            services.stop_clients()
            if pipeline is not None:
                pipeline.close({**meta, "polls": pipeline.stats.polls})
                result.polls, result.rows = pipeline.stats.polls, pipeline.stats.rows
            if control is not None:
                try:
                    control.close()
                except Exception as exc:  # teardown must go on
                    log.warning("closing the control step: %s", exc)
            services.stop()
            if opts.record is not None and meta:
                services.save_access_logs(opts.record)
            result.leftover_namespaces = lab_topology.destroy(topo.namespaces)
            if result.leftover_namespaces:
                log.error("could not delete namespaces: %s", " ".join(result.leftover_namespaces))
            else:
                log.info("lab %s: all %d namespaces removed", opts.run_id, len(topo.namespaces))
        return result

    def _meta(self) -> dict[str, Any]:
        o, topo = self.opts, self.topo
        s = o.scoring
        return {
            "format": "dyncc-lab-recording-2",
            "round_seconds": o.round_seconds,
            "scoring": {
                "lookback_buckets": s.lookback_buckets,
                "min_buckets": s.min_buckets,
                "threshold_quantile": s.threshold_quantile or threshold_for(topo),
                "holdout_fraction": s.holdout_fraction,
                "min_hold_buckets": s.min_hold_buckets,
                "max_new": s.max_new,
                "min_samples": s.min_samples,
            },
            "pops": {pop: [e.host for e in topo.edges_of(pop)] for pop in topo.pops},
            "prefixes": {p.prefix: [p.pop, p.klass] for p in topo.prefixes},
            "paths": LabServices.describe_paths(),
        }

    def _round(
        self,
        round_no: int,
        boundary: int,
        started: float,
        result: LabResult,
        services: LabServices,
        pipeline: TelemetryPipeline,
        control: RoundControl,
        references: ReferenceRoutes,
        polls: int,
    ) -> None:
        opts, topo = self.opts, self.topo
        services.shape_round(round_no)
        new = pipeline.take_new_sockets()
        pipeline.wait_loaded()
        result.requests += services.load_access_logs()
        round_time = dt.datetime.fromtimestamp(boundary, dt.UTC)
        outcome = control.round(round_time, round_no)
        references.apply(round_no, boundary)
        rows = class_rows(topo, outcome, new)
        decisions = Counter(s.decision for s in outcome.scores.values())
        header = lab_table.RoundHeader(
            round_no,
            time.monotonic() - started,
            opts.round_seconds,
            decisions[SELECT] + decisions[KEEP],
            len(topo.prefixes),
            decisions[HOLDOUT],
            outcome.note,
        )
        for p, s in outcome.scores.items():
            if s.decision in (SELECT, TRIAL) and p not in result.first_selected:
                result.first_selected[p] = round_no
            if s.decision == REVERT and p not in result.reverted:
                result.reverted[p] = (round_no, s.reason)
        result.rounds.append(RoundRecord(round_no, round_time, header, rows, outcome, new, polls))
        self._print(lab_table.render(header, rows) + "\n")
        problems = services.problems()
        if problems:
            log.warning("lab services: %s", "; ".join(problems))

    def _loop(
        self,
        stop: StopFlag,
        result: LabResult,
        services: LabServices,
        pipeline: TelemetryPipeline,
        control: RoundControl,
        references: ReferenceRoutes,
    ) -> None:
        opts, topo = self.opts, self.topo
        rs = opts.round_seconds
        planned = opts.planned_rounds()
        started = time.monotonic()
        # warm-up: the clients run at least one round unmeasured, so round 1 is a whole bucket of
        # clients past their start (all starting at once, in slow start, looked like poor paths)
        warm_until = (int(time.time()) // rs + 1) * rs + rs
        boundary = warm_until + rs
        round_no = 0
        log.info(
            "lab %s running: %d POPs x %d edge hosts, %d prefixes (%d ground-truth references), %ds rounds%s; "
            "warm-up %.0fs, first round in %.0fs",
            opts.run_id,
            len(topo.pops),
            len(topo.edges) // max(len(topo.pops), 1),
            len(topo.prefixes),
            len(result.references),
            rs,
            f", {planned} rounds" if planned else "",
            warm_until - time.time(),
            boundary - time.time(),
        )
        stop.wait(max(warm_until - time.time(), 0.0))
        pipeline.take_new_sockets()
        polling = PollThread(pipeline, opts.poll_interval)
        polling.start()
        try:
            polls_before = 0
            while not stop.is_set():
                polling.check()
                if time.time() >= boundary:
                    round_no += 1
                    polls_now = pipeline.stats.polls
                    self._round(
                        round_no, boundary, started, result, services, pipeline, control, references,
                        polls_now - polls_before,
                    )  # fmt: skip
                    polls_before = polls_now
                    if planned and round_no >= planned:
                        break
                    boundary += rs
                    if time.time() >= boundary:  # a slow round: skip to the next boundary
                        log.warning("round %d took longer than a bucket; skipping to the next boundary", round_no)
                        boundary = (int(time.time()) // rs + 1) * rs
                stop.wait(min(max(boundary - time.time(), 0.0), 0.5))
        finally:
            polling.stop()


class PollThread:
    """Polls the pipeline every `interval` seconds from its own thread until stopped; a failed poll
    is re-raised in the lab's thread by `check()` (the lab stops, as it did when it polled itself)."""

    def __init__(self, pipeline: TelemetryPipeline, interval: float) -> None:
        self.pipeline = pipeline
        self.interval = interval
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="lab-poll", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        next_poll = time.monotonic()
        while not self._done.is_set():
            try:
                self.pipeline.poll()
            except BaseException as exc:  # handed to the lab's thread
                self._error = exc
                return
            next_poll = max(next_poll + self.interval, time.monotonic())
            self._done.wait(max(next_poll - time.monotonic(), 0.0))

    def check(self) -> None:
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        self._done.set()
        self._thread.join(10.0)
