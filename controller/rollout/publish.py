"""`dyncc control` publishing: the Publisher a controller (or the lab) owns.

    Publisher(store, cfg, registry=None, clock=time.time_ns)
        cfg: a RolloutSettings (controller/rollout/settings.py); registry: the Prometheus
        registry its counters go on (a private one when None); clock: the time (ns)
        published configs carry (the lab and the demo replay pass their round time)
    publisher.publish_round(states)   per POP: generate, validate, sign, publish, record,
                                      advance the staged rollout; ingest apply statuses
                                      first; returns each POP's PublishOutcome (the caller
                                      records them in round_outcomes)
    publisher.failure                 why that round could publish nothing at all ('' = it ran)
    publisher.engine()                the RolloutEngine (kill switch, rollout advance)

Configs go to Kafka (`--kafka`, compacted `--config-topic`, key "<pop>" for
POP-wide configs and "<pop>/canary" for canary waves) or to files
(`--publish-dir`, DIR/<pop>.cfg and DIR/<pop>.canary.cfg).  With `--kafka`
the controller also reads ApplyStatus reports from `--status-topic` into
`apply_status`.  Staged rollout (canary first) needs those reports: it is on
with `--kafka` and off with `--publish-dir` alone (then every config goes to
the whole POP at once); `--staging on|off` overrides.  The sink, signer and
status reader are made on first use and kept by the Publisher.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.rollout import records as rs
from controller.rollout.engine import RolloutEngine
from controller.rollout.engine_config import RolloutConfig, StepCounters
from controller.rollout.generate import fingerprint, generate
from controller.rollout.signing import Signer
from controller.rollout.sinks import ConfigSink, DirConfigSink, KafkaConfigSink, PublishError
from controller.rollout.state import CANARY, IDLE, REST, RolloutState
from controller.rollout.state import KILLED as PHASE_KILLED
from controller.rollout.statuses import StatusIngestor
from controller.rollout.validate import ValidationPolicy
from controller.scoring.desired import DesiredState
from controller.store import Store, StoreError
from controller.store.outcomes import (
    HELD,
    KILLED,
    PUBLISH_FAILED,
    PUBLISHED,
    REJECTED,
    UNCHANGED,
    PublishOutcome,
)
from controller.store.sql import query
from dyncc_common.errors import ConfigError
from dyncc_common.kafka_security import librdkafka_options

if TYPE_CHECKING:
    from controller.rollout.settings import RolloutSettings

__all__ = ["Publisher"]

log = logging.getLogger("dyncc.publish")


class PublisherMetrics:
    """The publisher's counters on one registry."""

    def __init__(self, registry: Any) -> None:
        from prometheus_client import Counter

        self.published = Counter("dyncc_configs_published", "configs published", ["pop", "kind"], registry=registry)
        self.rejected = Counter("dyncc_configs_rejected", "configs rejected by validation", ["pop"], registry=registry)
        self.rollbacks = Counter("dyncc_rollbacks", "automatic rollbacks", ["pop"], registry=registry)
        self.status_rows = Counter("dyncc_apply_statuses", "apply statuses stored", registry=registry)
        self.status_bad = Counter("dyncc_apply_statuses_malformed", "malformed statuses skipped", registry=registry)

    def statuses(self, stored: int, malformed: int) -> None:
        self.status_rows.inc(stored)
        self.status_bad.inc(malformed)

    def step(self, pop: str, counters: StepCounters) -> None:
        for kind, n in counters.published.items():
            self.published.labels(pop, kind).inc(n)
        self.rejected.labels(pop).inc(counters.rejected)
        self.rollbacks.labels(pop).inc(counters.rollbacks)


class Publisher:
    """Publishes one store's desired states with one RolloutSettings (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        cfg: RolloutSettings,
        registry: Any = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        if not cfg.private_key:
            raise ConfigError("--key PRIVATE_PEM is required to sign configs (create one: dyncc control keygen)")
        if not cfg.kafka and not cfg.publish_dir:
            raise ConfigError("nowhere to publish: give --kafka BROKERS or --publish-dir DIR")
        if registry is None:
            from prometheus_client import CollectorRegistry

            registry = CollectorRegistry()
        self.store = store
        self.cfg = cfg
        self.clock = clock
        self.metrics = PublisherMetrics(registry)
        self.policy = ValidationPolicy.from_settings(cfg)
        self.rollout_config = RolloutConfig.from_settings(cfg)
        self._sink: ConfigSink | None = None
        self._signer: Signer | None = None
        self._status: StatusIngestor | None = None
        #: why the last publish_round could publish nothing at all (no sink or signer), '' = it ran
        self.failure = ""

    def _open(self) -> tuple[ConfigSink, Signer]:
        """The sink, signer and status reader, made on first use (PublishError, ConfigError)."""
        if self._sink is None or self._signer is None:
            cfg = self.cfg
            signer = Signer.from_file(Path(str(cfg.private_key)))
            kafka_options = librdkafka_options(cfg.kafka_security) if cfg.kafka else {}  # TLS / SASL
            sink: ConfigSink = (
                DirConfigSink(Path(cfg.publish_dir))
                if cfg.publish_dir
                else KafkaConfigSink(str(cfg.kafka), cfg.config_topic, options=kafka_options)
            )
            self._status = (
                StatusIngestor(cfg.kafka, cfg.status_topic, cfg.status_group, options=kafka_options)
                if cfg.kafka
                else None
            )
            self._sink, self._signer = sink, signer
            log.info(
                "publishing configs to %s (key id %s)%s",
                sink.description,
                signer.key_id,
                f"; statuses from topic {cfg.status_topic}" if self._status else "",
            )
        return self._sink, self._signer

    def engine(self) -> RolloutEngine:
        sink, signer = self._open()
        return RolloutEngine(self.store, sink, signer, self.policy, self.rollout_config, self.clock)

    def ingest_statuses(self) -> None:
        self._open()
        if self._status is None:
            return
        try:
            result = self._status.ingest(self.store)
        except PublishError as exc:
            log.warning("apply statuses not read this round: %s", exc)
            return
        if result.read:
            log.info("read %d apply statuses (%d stored, %d malformed)", result.read, result.inserted, result.malformed)
        self.metrics.statuses(result.inserted, result.malformed)

    def publish_round(self, states: list[DesiredState]) -> dict[str, PublishOutcome]:
        """Ingest statuses, then for each POP of `states` and each POP with a rollout in flight:
        generate, validate, sign, publish, record and advance the staged rollout.

        A POP whose publish fails (sink, signer or store error) is logged and skipped (its state
        does not move); the others go on.  Returns the outcome of each POP of `states`, for the
        caller to record in round_outcomes.  `failure` says why when nothing could be published
        (also when `states` is empty: `control --once` exits 1 on it).
        """
        desired = {s.pop: s for s in states}
        self.failure = ""
        try:
            engine = self.engine()
        except PublishError as exc:
            log.error("nothing published this round: %s", exc)
            self.failure = str(exc)
            return {pop: PublishOutcome(pop, PUBLISH_FAILED, reason=str(exc)) for pop in desired}
        self.ingest_statuses()
        in_flight = [
            pop
            for pop in rs.rollout_pops(self.store)
            if pop not in desired and rs.load_state(self.store, pop).phase in (CANARY, REST)
        ]
        outcomes = {}
        for pop in sorted(desired) + in_flight:
            engine.counters = StepCounters()
            since = engine.clock()
            try:
                state = engine.step(pop, desired.get(pop))
                log.debug(
                    "%s: phase %s stable v%d wave v%d", pop, state.phase, state.stable_version, state.wave_version
                )
                if pop in desired:
                    outcomes[pop] = _outcome(engine, desired[pop], state, since)
            except (PublishError, StoreError) as exc:
                log.error("%s: not published this round: %s", pop, exc)
                if pop in desired:
                    outcomes[pop] = PublishOutcome(pop, PUBLISH_FAILED, reason=str(exc))
            finally:
                self.metrics.step(pop, engine.counters)
        return dict(sorted(outcomes.items()))


def _outcome(engine: RolloutEngine, desired: DesiredState, state: RolloutState, since_ns: int) -> PublishOutcome:
    """What the step did with the desired state: the config_versions row it wrote for the round
    (published / rejected / publish_failed), else why nothing was generated."""
    rows = engine.store.query_rows(
        query("rollout_round_outcome"),
        {"pop": desired.pop, "round_id": desired.round_id, "since": since_ns},
    )
    if rows:
        status, version, reasons = _text(rows[0][0]), int(rows[0][1]), [_text(r) for r in list(rows[0][2])]
        if status in (PUBLISHED, REJECTED, PUBLISH_FAILED):
            return PublishOutcome(desired.pop, status, version, "; ".join(reasons[:3]))
    if state.phase == PHASE_KILLED:
        return PublishOutcome(desired.pop, KILLED, state.stable_version, "kill switch engaged")
    if state.phase != IDLE:
        why = f"rollout of v{state.candidate_version} in flight ({state.phase})"
        if desired.trial_prefixes and not engine.wave_holds(state, desired):
            # the trials' toggles are in force: they do not wait for the wave
            return PublishOutcome(desired.pop, UNCHANGED, state.stable_version, f"{why}; trial toggles in force")
        return PublishOutcome(desired.pop, HELD, state.stable_version, why)
    fp = fingerprint(generate(desired, 0, created_at_ns=0, lock=engine.config.lock).entries)
    if fp == state.failed_fingerprint and since_ns - state.failed_at_ns < engine.config.holddown_ns:
        return PublishOutcome(desired.pop, HELD, state.stable_version, "held down after a rollback")
    return PublishOutcome(desired.pop, UNCHANGED, state.stable_version)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
