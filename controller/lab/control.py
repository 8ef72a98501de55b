"""The lab's control step: scoring -> publish -> edge agent, once per accelerated round.

The scoring definitions are the controller's own, with the clock scaled: the
bucket is the lab round, lookback / hold / cooldown are the production values
expressed in buckets, and min_rtt is 0 (veth links have no propagation delay and
tbf only adds queueing, so every lab prefix would count as low-RTT and stay on
CUBIC).  Duty cycle and flap ratio come from controller.scoring.query; the
decisions and DesiredState from the scoring component; configs are generated,
validated, signed and published by the lab's own Publisher (controller.rollout.publish,
built from a RolloutConfig in lab seconds: to a directory, or to Kafka), and this module
records the outcomes; the edge agent applies them (controller/lab/agent.py).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable
from pathlib import Path

from controller.lab.agent import LabAgent
from controller.lab.loop import ControlOutcome, LabOptions, PrefixScore, threshold_for
from controller.lab.topology import Topology
from controller.rollout.publish import Publisher
from controller.rollout.settings import RolloutConfig
from controller.rollout.signing import keygen
from controller.rollout.validate import refusal
from controller.scoring.round import run_round
from controller.scoring.settings import ROLLUP_BUCKET_SECONDS, ScoringConfig
from controller.scoring.state import write_outcomes
from controller.store import Store, StoreError
from dyncc_common.errors import DynccError
from schemas.congestion_pb2 import CongestionConfig

log = logging.getLogger("dyncc.lab")

DAY_BUCKETS = 24 * 3600 // ROLLUP_BUCKET_SECONDS  # hold / cooldown of one day, in buckets


def lab_scoring_config(
    bucket_seconds: int,
    lookback_buckets: int,
    min_buckets: int,
    threshold_quantile: float,
    holdout_fraction: float,
) -> ScoringConfig:
    lookback = bucket_seconds * lookback_buckets
    return ScoringConfig(
        bucket_seconds=bucket_seconds,
        lookback_seconds=lookback,
        min_buckets=min_buckets,
        min_rtt_ms=0.0,
        threshold_quantile=threshold_quantile,
        holdout_fraction=holdout_fraction,
        min_hold_seconds=DAY_BUCKETS * bucket_seconds,
        cooldown_seconds=DAY_BUCKETS * bucket_seconds,
    )


EXPIRE_BUCKETS = 7 * DAY_BUCKETS  # scoring's 7-day expiry, in buckets


class RoundFailed(DynccError):
    """A scoring/publish round failed (store error); the lab goes on with the next round."""


class LabControl:
    def __init__(
        self,
        store: Store,
        *,
        pop: str,
        scoring: ScoringConfig,
        workdir: Path,
        agent: LabAgent | None = None,
        kafka: str | None = None,
        config_topic: str = "",
        status_topic: str = "",
    ) -> None:
        self.store = store
        self.pop = pop
        self.scoring = scoring
        self.agent = agent
        self.kafka = kafka
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
        self._refuse: Callable[[str], str | None] | None = None  # validation's per-prefix rule
        self._round_ns = 0  # the time published configs carry: the round's (a replay shifts the clock)

    def round(self, round_time: dt.datetime, round_no: int) -> ControlOutcome:
        scores: dict[str, PrefixScore] = {}
        note = ""
        try:
            scores = self._score_and_publish(round_time)
        except RoundFailed as exc:
            note = f"round failed: {str(exc)[:120]}"
        routes: dict[str, str] = {}
        if self.agent is not None:
            if self.kafka:
                self.agent.apply_from_kafka()
            else:
                self.agent.apply_from_dir(self.publish_dir)
            routes = self.agent.routes()
        else:
            routes = self._published_entries()
        return ControlOutcome(scores, routes, note)

    def _score_and_publish(self, round_time: dt.datetime) -> dict[str, PrefixScore]:
        """The scoring component's round (scores, decisions, DesiredState), then the publisher."""
        publisher = self.publisher()
        try:
            res = run_round(
                self.store,
                self.scoring,
                now=round_time,
                pop=self.pop,
                expire_seconds=EXPIRE_BUCKETS * self.scoring.bucket_seconds,
                refuse=self._refuse,
            )
            self._round_ns = int(round_time.timestamp() * 1e9)
            outcomes = publisher.publish_round(res.states)
            desired = {s.pop: s for s in res.states}
            write_outcomes(self.store, [(desired[pop], o) for pop, o in outcomes.items()])
        except StoreError as exc:
            log.error("round at %s failed: %s", round_time, exc)
            raise RoundFailed(str(exc)) from exc
        return {
            str(r["prefix"]): PrefixScore(
                int(r["counted_buckets"]), float(r["duty_cycle"]), float(r["flap_ratio"]), str(r["decision"])
            )
            for r in res.decisions.to_dict("records")
        }

    def publisher(self) -> Publisher:
        """The lab's Publisher (made once), on the round's clock."""
        if self._publisher is None:
            cfg = self.rollout_config()
            self._publisher = Publisher(self.store, cfg, clock=lambda: self._round_ns)
            self._refuse = refusal(cfg.validation_policy())
        return self._publisher

    def rollout_config(self) -> RolloutConfig:
        """Publisher settings for the lab: one edge host, so no canary; durations in lab buckets."""
        b = self.scoring.bucket_seconds

        def scaled(real_seconds: int) -> float:
            return float(max(real_seconds * b // ROLLUP_BUCKET_SECONDS, 1))

        cfg = RolloutConfig(
            publish_dir=None if self.kafka else self.publish_dir,
            kafka=self.kafka,
            private_key=self.private_key,
            staging="off",
            soak=scaled(600),
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

    def _published_entries(self) -> dict[str, str]:
        path = self.publish_dir / f"{self.pop}.cfg"
        if not path.exists():
            return {}
        cfg = CongestionConfig.FromString(path.read_bytes())
        return {e.prefix: e.algorithm for e in cfg.entries}

    def close(self) -> None:
        if self.agent is not None:
            self.agent.close()


def make_control_factory(workdir: Path) -> Callable[[Store, Topology, LabOptions], LabControl]:
    def factory(store: Store, topo: Topology, opts: LabOptions) -> LabControl:
        q = opts.threshold_quantile if opts.threshold_quantile is not None else threshold_for(topo)
        scoring = lab_scoring_config(
            opts.round_seconds, opts.lookback_buckets, opts.min_buckets, q, opts.holdout_fraction
        )
        config_topic = f"dyncc-lab-{opts.run_id}-configs"
        status_topic = f"dyncc-lab-{opts.run_id}-status"
        control = LabControl(
            store,
            pop=opts.pop,
            scoring=scoring,
            workdir=workdir,
            kafka=opts.kafka,
            config_topic=config_topic,
            status_topic=status_topic,
        )
        control.agent = LabAgent(
            store,
            edge_ns=topo.edge_ns,
            pop=opts.pop,
            host=opts.host,
            public_key=control.public_key,
            state_dir=workdir / "agent",
            kafka=opts.kafka,
            config_topic=config_topic,
            status_topic=status_topic,
        )
        return control

    return factory
