"""The lab's orchestration: topology up, traffic on, then per accelerated round
shaping -> telemetry -> scoring -> publish -> agent -> table, and everything torn down.

Rounds follow wall-clock buckets of `round_seconds` (the scoring bucket), so a
round's telemetry is exactly one bucket.  At each boundary: alternating links
flip, the pipeline confirms every polled batch is in the store, the control
step scores the window that just closed and (through the publisher and the
edge agent) installs routes, and the table for the round is printed.
Whatever happens (error, Ctrl-C, SIGTERM via StopFlag), the traffic processes
stop and every namespace of the run is deleted.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

from controller.lab import table as lab_table
from controller.lab import topology as lab_topology
from controller.lab.pipeline import TelemetryPipeline
from controller.lab.traffic import TrafficProcs
from controller.store import Store
from dyncc_common.runtime import StopFlag

log = logging.getLogger("dyncc.lab")


@dataclass
class LabOptions:
    round_seconds: int = 20
    rounds: int = 0  # 0: until `duration` (or stopped)
    duration: float = 0.0  # seconds; 0 with rounds 0: until stopped
    poll_interval: float = 0.5
    lookback_buckets: int = 12
    min_buckets: int = 4
    slow: int = 2
    alternating: int = 2
    fine: int = 4
    pop: str = "lab"
    host: str = "lab-edge"
    kafka: str | None = None
    record: Path | None = None
    threshold_quantile: float | None = None  # None: derived from the layout (see threshold_for)
    holdout_fraction: float = 0.0
    port: int = 8080
    run_id: str = field(default_factory=lambda: secrets.token_hex(2))
    shaping: lab_topology.Shaping = field(default_factory=lab_topology.Shaping)

    def planned_rounds(self) -> int:
        if self.rounds:
            return self.rounds
        if self.duration:
            return max(int(self.duration // self.round_seconds), 1)
        return 0


def threshold_for(topo: lab_topology.Topology) -> float:
    """A threshold quantile that falls between the shaped and the unshaped prefixes every round.

    ClickHouse's quantileExact(q) over n values is the value at index floor(q * n); a prefix is
    bad when below it, so floor(q * n) must equal the number of prefixes shaped in a round.
    """
    n = len(topo.clients)
    slow = sum(1 for c in topo.clients if c.slow_in_round(0))
    return min((slow + 0.5) / n, 0.95) if n else 0.2


@dataclass
class PrefixScore:
    counted_buckets: int
    duty_cycle: float
    flap_ratio: float
    decision: str


@dataclass
class ControlOutcome:
    scores: dict[str, PrefixScore]
    routes: dict[str, str]  # owned route prefix -> congctl on the edge
    note: str = ""


class RoundControl(Protocol):
    """Scoring + publishing + the edge agent, one call per round."""

    def round(self, round_time: dt.datetime, round_no: int) -> ControlOutcome: ...

    def close(self) -> None: ...


@dataclass
class RoundRecord:
    round_no: int
    header: lab_table.RoundHeader
    rows: list[lab_table.PrefixRow]
    outcome: ControlOutcome


@dataclass
class LabResult:
    topology: lab_topology.Topology
    rounds: list[RoundRecord] = field(default_factory=list)
    polls: int = 0
    rows: int = 0
    stopped_by: str = ""
    leftover_namespaces: list[str] = field(default_factory=list)
    first_selected: dict[str, int] = field(default_factory=dict)  # prefix -> round first selected


def _shaping_label(client: lab_topology.Client, round_no: int) -> str:
    if client.profile == "alternating":
        return "alt (slow)" if client.slow_in_round(round_no) else "alt (fast)"
    return client.profile


def round_rows(
    topo: lab_topology.Topology, round_no: int, outcome: ControlOutcome, new: dict[str, Counter[str]]
) -> list[lab_table.PrefixRow]:
    rows = []
    for c in topo.clients:
        s = outcome.scores.get(c.prefix)
        rows.append(
            lab_table.PrefixRow(
                prefix=c.prefix,
                shaping=_shaping_label(c, round_no),
                counted_buckets=s.counted_buckets if s else None,
                duty_cycle=s.duty_cycle if s else None,
                flap_ratio=s.flap_ratio if s else None,
                decision=s.decision if s else "",
                route=outcome.routes.get(c.prefix, ""),
                new_sockets=dict(new.get(c.prefix, {})),
            )
        )
    return rows


class Lab:
    """One lab run; `run()` always tears down what it built."""

    def __init__(
        self,
        opts: LabOptions,
        store: Store,
        make_control: Callable[[Store, lab_topology.Topology, LabOptions], RoundControl],
        out: TextIO | None = None,
    ) -> None:
        self.opts = opts
        self.store = store
        self.make_control = make_control
        self.out = out or sys.stdout
        self.topo = lab_topology.describe(
            opts.run_id, opts.slow, opts.alternating, opts.fine, port=opts.port, shaping=opts.shaping
        )

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def run(self, stop: StopFlag) -> LabResult:
        opts, topo = self.opts, self.topo
        result = LabResult(topo)
        traffic = TrafficProcs()
        pipeline: TelemetryPipeline | None = None
        control: RoundControl | None = None
        meta: dict[str, Any] = {}
        try:
            lab_topology.build(topo)
            lab_topology.apply_shaping(topo, 0)
            traffic.start_server(topo.edge_ns, topo.port)
            time.sleep(0.3)
            for c in topo.clients:
                traffic.start_client(c.ns, topo.edge_addr(c.family), topo.port, seed=c.index + 1)
            pipeline = TelemetryPipeline(
                self.store,
                edge_ns=topo.edge_ns,
                host=opts.host,
                pop=opts.pop,
                kafka=opts.kafka,
                topic=f"dyncc-lab-{opts.run_id}-tcpinfo",
                record=opts.record,
            )
            control = self.make_control(self.store, topo, opts)
            meta = self._meta()
            self._loop(stop, result, traffic, pipeline, control)
        finally:
            if stop.is_set():
                result.stopped_by = stop.signal_name or "stop"
            traffic.stop()
            if pipeline is not None:
                pipeline.close({**meta, "polls": pipeline.stats.polls})
                result.polls, result.rows = pipeline.stats.polls, pipeline.stats.rows
            if control is not None:
                try:
                    control.close()
                except Exception as exc:  # teardown must go on
                    log.warning("closing the control step: %s", exc)
            result.leftover_namespaces = lab_topology.destroy(topo.namespaces)
            if result.leftover_namespaces:
                log.error("could not delete namespaces: %s", " ".join(result.leftover_namespaces))
            else:
                log.info("lab %s: all %d namespaces removed", opts.run_id, len(topo.namespaces))
        return result

    def _meta(self) -> dict[str, Any]:
        o = self.opts
        return {
            "format": "dyncc-lab-recording-1",
            "round_seconds": o.round_seconds,
            "lookback_buckets": o.lookback_buckets,
            "min_buckets": o.min_buckets,
            "pop": o.pop,
            "host": o.host,
            "threshold_quantile": o.threshold_quantile
            if o.threshold_quantile is not None
            else threshold_for(self.topo),
            "holdout_fraction": o.holdout_fraction,
            "shaping": {"rate": o.shaping.rate, "burst": o.shaping.burst, "latency": o.shaping.latency},
            "prefixes": {c.prefix: c.profile for c in self.topo.clients},
        }

    def _loop(
        self,
        stop: StopFlag,
        result: LabResult,
        traffic: TrafficProcs,
        pipeline: TelemetryPipeline,
        control: RoundControl,
    ) -> None:
        opts, topo = self.opts, self.topo
        rs = opts.round_seconds
        planned = opts.planned_rounds()
        started = time.monotonic()
        boundary = (int(time.time()) // rs + 1) * rs
        round_no = 0
        log.info(
            "lab %s running: %d prefixes, %ds rounds%s; first boundary in %.0fs",
            opts.run_id,
            len(topo.clients),
            rs,
            f", {planned} rounds" if planned else "",
            boundary - time.time(),
        )
        next_poll = time.monotonic()
        pipeline.new_sockets.take()
        while not stop.is_set():
            if time.time() >= boundary:
                round_no += 1
                lab_topology.apply_shaping(topo, round_no)
                new = pipeline.new_sockets.take()
                pipeline.wait_loaded()
                round_time = dt.datetime.fromtimestamp(boundary, dt.UTC)
                outcome = control.round(round_time, round_no)
                rows = round_rows(topo, round_no - 1, outcome, new)
                routed = {p for p, cc in outcome.routes.items() if cc == "bbr"}
                selected = sum(1 for s in outcome.scores.values() if s.decision in ("select", "keep"))
                header = lab_table.RoundHeader(
                    round_no,
                    time.monotonic() - started,
                    rs,
                    selected,
                    len(topo.clients),
                    len(outcome.routes),
                    lab_table.bbr_share(rows, True, routed),
                    lab_table.bbr_share(rows, False, routed),
                    outcome.note,
                )
                for p, s in outcome.scores.items():
                    if s.decision == "select" and p not in result.first_selected:
                        result.first_selected[p] = round_no
                result.rounds.append(RoundRecord(round_no, header, rows, outcome))
                self._print(lab_table.render(header, rows) + "\n")
                if traffic.exited():
                    log.warning("%d traffic processes ended early", traffic.exited())
                if planned and round_no >= planned:
                    break
                boundary += rs
                if time.time() >= boundary:  # a slow round: skip to the next boundary
                    boundary = (int(time.time()) // rs + 1) * rs
            now = time.monotonic()
            if now >= next_poll:
                pipeline.poll()
                next_poll = max(next_poll + opts.poll_interval, time.monotonic())
            wait = min(next_poll - time.monotonic(), boundary - time.time())
            if wait > 0:
                stop.wait(wait)
