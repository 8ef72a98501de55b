"""The lab's control step: scoring -> staged publish -> edge agents, once per accelerated round.

The round is the controller's own (controller/control/loop.py `Controller`, the object
`dyncc control` schedules: scoring, trials, decisions, the record and the publish), with the
clock scaled: the bucket is the lab round; lookback, minimum buckets, minimum hold and cooldown
are given in buckets; the low-RTT rule is the production one (10 ms: the lab's delay source
gives every path class but the low-RTT one a longer RTT).  Its Publisher is the lab's
(controller.rollout.publish, a RolloutSettings in lab seconds, to a directory or to Kafka, on
the round's clock), staged when a POP has several edge hosts: the first host of each POP is
its canary, the rest follow after the (scaled) soak; each edge host's agent
(dyncc/lab/agent.py) applies what targets it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from controller.control.loop import Controller, Metrics
from controller.control.settings import ControlSettings
from controller.evidence.settings import EvidenceSettings
from controller.rollout.publish import Publisher
from controller.rollout.settings import RolloutSettings
from controller.rollout.signing import keygen
from controller.scoring.settings import ROLLUP_BUCKET_SECONDS, ScoringSettings
from controller.store import Store
from dyncc.lab.agent import LabAgent
from dyncc.lab.loop import LabOptions, threshold_for
from dyncc.lab.model import ControlOutcome, PrefixScore
from dyncc.lab.topology import Topology
from dyncc_common.errors import DynccError
from dyncc_common.kafka_security import KafkaSecurity, librdkafka_options
from schemas.congestion_pb2 import CongestionConfig

log = logging.getLogger("dyncc.lab")

# The canary's p10 over its changed prefixes in windows of a few lab rounds moves by tens of
# percent between rounds on its own, and a wave that moves deep-buffer prefixes to BBR loses
# about half of it there (BBR keeps too little in flight while a busy uplink holds their ACKs:
# dyncc/lab/paths.py DEEP): the production gate (15 %) rolls such a wave back at the canary.  The
# lab widens it so the waves reach the POP and the trials' own reverts show.
LAB_MAX_P10_REGRESSION = 0.75


class RoundFailed(DynccError):
    """A scoring/publish round failed (store error); the lab goes on with the next round."""


class LabControl:
    def __init__(
        self,
        store: Store,
        *,
        scoring: ScoringSettings,
        workdir: Path,
        hosts: dict[str, list[str]] | None = None,
        staged: bool = True,
        agents: Sequence[LabAgent] = (),
        kafka: str | None = None,
        kafka_security: KafkaSecurity | None = None,
        config_topic: str = "",
        status_topic: str = "",
        evidence: EvidenceSettings | None = None,
    ) -> None:
        self.store = store
        self.scoring = scoring
        self.evidence = evidence or EvidenceSettings()
        self.hosts = hosts or {}  # pop -> edge hosts (first = canary)
        self.staged = staged  # canary first where a POP has several hosts (needs their agents' reports)
        self.agents = list(agents)
        self.kafka = kafka
        self.kafka_security = kafka_security or KafkaSecurity()
        self.config_topic = config_topic
        self.status_topic = status_topic
        self.publish_dir = workdir / "configs"
        self.publish_dir.mkdir(parents=True, exist_ok=True)
        keys = workdir / "keys"
        if (keys / "dyncc-config.key").exists():
            self.private_key, self.public_key = keys / "dyncc-config.key", keys / "dyncc-config.pub"
        else:
            self.private_key, self.public_key = keygen(keys)
        self._publisher: Publisher | None = None
        self._controller: Controller | None = None
        self._round_ns = 0  # the time published configs carry: the round's (a replay shifts the clock)

    def round(self, round_time: dt.datetime, round_no: int) -> ControlOutcome:
        scores: dict[str, PrefixScore] = {}
        note = ""
        try:
            scores, note = self._score_and_publish(round_time)
        except RoundFailed as exc:
            note = f"round failed: {str(exc)[:120]}"
        routes: dict[str, dict[str, str]] = {}
        for agent in self.agents:
            if self.kafka:
                agent.apply_from_kafka()
            else:
                agent.apply_from_dir(self.publish_dir)
            routes[agent.host] = agent.routes()
        if not self.agents:  # a replay: what the POP's hosts would hold
            routes = {host: self._published_entries(pop) for pop, hosts in self.hosts.items() for host in hosts}
        return ControlOutcome(scores, routes, note)

    def _score_and_publish(self, round_time: dt.datetime) -> tuple[dict[str, PrefixScore], str]:
        """The controller's own round (controller/control/loop.py `Controller`, as `dyncc control`
        runs it: score, trials, decide, record, publish) on the lab's clock."""
        controller = self.controller()
        self._round_ns = int(round_time.timestamp() * 1e9)
        res = controller.round(round_time)
        if res is None:
            raise RoundFailed(f"round at {round_time:%H:%M:%S} failed (store error: see the log)")
        scores = {
            str(r["prefix"]): PrefixScore(
                str(r["pop"]),
                int(r["counted_buckets"]),
                float(r["duty_cycle"]),
                float(r["flap_ratio"]),
                float(r["median_min_rtt_ms"]),
                str(r["decision"]),
                str(r["reason"]),
                str(r["algorithm"]),
            )
            for r in res.decisions.to_dict("records")
        }
        note = "; ".join(f"{pop} {o.status} v{o.version}" for pop, o in sorted(res.outcomes.items()))
        return scores, note

    def controller(self) -> Controller:
        """The controller (made once) with the lab's settings and its Publisher."""
        if self._controller is None:
            settings = ControlSettings(
                scoring=self.scoring,
                evidence=self.evidence,
                rollout=self.rollout_settings(),
                every=float(self.scoring.bucket_seconds),
                delay=0.0,
            )
            self._controller = Controller(self.store, settings, Metrics(), publisher=self.publisher())
        return self._controller

    def publisher(self) -> Publisher:
        """The lab's Publisher (made once), on the round's clock."""
        if self._publisher is None:
            cfg = self.rollout_settings()
            self._publisher = Publisher(self.store, cfg, clock=lambda: self._round_ns)
        return self._publisher

    def rollout_settings(self) -> RolloutSettings:
        """Publisher settings for the lab: staged when a POP has several hosts; durations in lab buckets."""
        b = self.scoring.bucket_seconds

        def scaled(real_seconds: int) -> float:
            return float(max(real_seconds * b // ROLLUP_BUCKET_SECONDS, 1))

        staged = self.staged and any(len(h) > 1 for h in self.hosts.values())
        cfg = RolloutSettings(
            publish_dir=None if self.kafka else self.publish_dir,
            kafka=self.kafka,
            kafka_security=self.kafka_security,
            private_key=self.private_key,
            staging="on" if staged else "off",
            hosts=tuple(f"{pop}:{','.join(h)}" for pop, h in sorted(self.hosts.items()) if h),
            canary_hosts=tuple(f"{pop}:{h[0]}" for pop, h in sorted(self.hosts.items()) if len(h) > 1),
            soak=float(b),  # one lab round (production: 10 minutes)
            max_p10_regression=LAB_MAX_P10_REGRESSION,
            wave_timeout=scaled(900),
            baseline=scaled(900),
            host_expiry=scaled(3600),
            holddown=scaled(3600),
        )
        if not self.kafka:
            return cfg
        return dataclasses.replace(
            cfg,
            config_topic=self.config_topic,
            status_topic=self.status_topic,
            status_group=f"{self.config_topic}-controller",
        )

    def _published_entries(self, pop: str) -> dict[str, str]:
        path = self.publish_dir / f"{pop}.cfg"
        if not path.exists():
            return {}
        cfg = CongestionConfig.FromString(path.read_bytes())
        return {e.prefix: e.algorithm for e in cfg.entries}

    def close(self) -> None:
        for agent in self.agents:
            try:
                agent.close()
            except Exception as exc:  # teardown must go on
                log.warning("closing the agent of %s: %s", agent.host, exc)


def make_control_factory(workdir: Path) -> Callable[[Store, Topology, LabOptions], LabControl]:
    def factory(store: Store, topo: Topology, opts: LabOptions) -> LabControl:
        scoring = dataclasses.replace(
            opts.scoring,
            threshold_quantile=opts.scoring.threshold_quantile or threshold_for(topo),
        ).scoring_settings(opts.round_seconds)
        config_topic = f"dyncc-lab-{opts.run_id}-configs"
        status_topic = f"dyncc-lab-{opts.run_id}-status"
        hosts = {pop: [e.host for e in topo.edges_of(pop)] for pop in topo.pops}
        control = LabControl(
            store,
            scoring=scoring,
            workdir=workdir,
            hosts=hosts,
            kafka=opts.kafka,
            kafka_security=opts.kafka_security,
            config_topic=config_topic,
            status_topic=status_topic,
            evidence=opts.scoring.evidence_settings(),
        )
        control.agents = [
            LabAgent(
                store,
                edge_ns=e.ns,
                pop=e.pop,
                host=e.host,
                public_key=control.public_key,
                state_dir=workdir / "agent" / e.host,
                kafka=opts.kafka,
                kafka_options=librdkafka_options(opts.kafka_security) if opts.kafka else {},
                config_topic=config_topic,
                status_topic=status_topic,
                enforce=opts.enforce,
            )
            for e in topo.edges
        ]
        return control

    return factory
