"""The edge agent's decisions wired to its enforcement I/O (no Kafka here).

`Agent.handle(config)` verifies a CongestionConfig (signature, POP, version,
entries), applies it all-or-nothing (as routes, or with `applier=` another
enforcement mode such as collector/agent/bpf/apply.py), persists it, and
returns the ApplyStatus to report.  `Agent.reconcile(reason)` re-applies the
config in force so owned routes follow their covering routes and stale ones go
(in the bpf mode: the maps equal the config and the program is attached).
Both log one line and update the per-instance Prometheus registry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from collector.agent.apply import Applier, ApplyOutcome, RouteApplier
from collector.agent.health import available_congestion_controls, read_health
from collector.agent.plan import ACCEPT, IGNORE, REFUSE, InvalidConfig, Verdict, Wanted, check_config, parse_wanted
from collector.agent.routes import RouteTable
from collector.agent.state import AgentState
from schemas.congestion_pb2 import ApplyStatus, CongestionConfig
from schemas.signing import SignatureError, verify

log = logging.getLogger("dyncc.agent")
MAX_STATUS_ERRORS = 50


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.configs = Counter("dyncc_agent_configs", "configs handled, by result", ["result"], registry=r)
        self.refused = Counter("dyncc_agent_configs_refused", "configs refused, by reason", ["reason"], registry=r)
        self.reconciles = Counter(
            "dyncc_agent_reconciles", "reconciles, by trigger and result", ["trigger", "result"], registry=r
        )
        self.route_changes = Counter("dyncc_agent_route_changes", "owned route writes, by kind", ["kind"], registry=r)
        self.owned = Gauge("dyncc_agent_owned_routes", "routes owned by this agent", registry=r)
        self.skipped = Gauge("dyncc_agent_skipped_prefixes", "desired prefixes not installed", registry=r)
        self.applied_version = Gauge("dyncc_agent_applied_version", "config version in force", registry=r)
        self.apply_seconds = Histogram(
            "dyncc_agent_apply_seconds",
            "apply/reconcile duration",
            registry=r,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10),
        )
        self.route_events = Counter("dyncc_agent_route_events", "covering route changes seen", registry=r)
        self.kafka_errors = Counter("dyncc_agent_kafka_errors", "Kafka consume/produce errors", registry=r)
        self.malformed = Counter("dyncc_agent_malformed_configs", "undecodable config messages", registry=r)
        self.bpf_attached = Gauge("dyncc_agent_bpf_attached", "enforce bpf: 1 when the program is attached", registry=r)
        self.bpf_connections = Gauge(
            "dyncc_agent_bpf_connections",
            "enforce bpf: connections to selected prefixes (selected) and of those switched, since the program loaded",
            ["event"],
            registry=r,
        )


class Agent:
    def __init__(
        self,
        *,
        pop: str,
        host: str,
        netns: str | None,
        public_key: Ed25519PublicKey,
        state: AgentState,
        table: RouteTable | None = None,
        metrics: AgentMetrics | None = None,
        applier: Applier | None = None,
    ) -> None:
        self.pop = pop
        self.host = host
        self.netns = netns
        self.public_key = public_key
        self.state = state
        self._table = table
        if applier is None:
            if table is None:
                raise ValueError("Agent needs a route table or an applier")
            applier = RouteApplier(table)
        self.applier: Applier = applier
        self.metrics = metrics or AgentMetrics()
        self.wanted: dict[str, Wanted] | None = None
        self.metrics.applied_version.set(state.version)
        if state.config is not None:
            self.wanted = self._stored_wanted(state.config)

    @property
    def table(self) -> RouteTable:
        """The route table of the route mode (RuntimeError in another mode)."""
        if self._table is None:
            raise RuntimeError("this agent enforces without routes: it has no route table")
        return self._table

    def _stored_wanted(self, config: CongestionConfig) -> dict[str, Wanted] | None:
        """The persisted config's prefixes, if it still verifies (else: follow owned routes only)."""
        try:
            verify(config, self.public_key)
            return parse_wanted(config, None)
        except (SignatureError, InvalidConfig) as exc:
            log.error("stored config v%d is not usable (%s): keeping owned routes as they are", config.version, exc)
            return None

    # ----------------------------------------------------------------- status

    def status(self, version: int, result: int, outcome: ApplyOutcome | None, errors: list[str]) -> ApplyStatus:
        owned = outcome.owned if outcome is not None else self.applier.owned_count()
        status = ApplyStatus(
            host=self.host,
            pop=self.pop,
            version=version,
            result=result,  # type: ignore[arg-type]
            health=read_health(self.netns, owned),
            reported_at_ns=time.time_ns(),
            applied_version=self.state.version,
        )
        self.applier.describe_health(status.health)
        if status.health.enforce == "bpf":
            self.metrics.bpf_attached.set(int(status.health.bpf_attached))
            self.metrics.bpf_connections.labels("selected").set(status.health.bpf_selected)
            self.metrics.bpf_connections.labels("switched").set(status.health.bpf_switched)
        if outcome is not None:
            status.routes_added = outcome.added + outcome.replaced
            status.routes_removed = outcome.removed
            status.routes_kept = outcome.kept
            errors = [*errors, *outcome.errors]
            errors.extend(f"skipped {p}: {why}" for p, why in sorted(outcome.skipped.items()))
        if len(errors) > MAX_STATUS_ERRORS:
            errors = [*errors[:MAX_STATUS_ERRORS], f"... and {len(errors) - MAX_STATUS_ERRORS} more"]
        status.errors.extend(errors)
        return status

    def _observe(self, outcome: ApplyOutcome) -> None:
        m = self.metrics
        m.apply_seconds.observe(outcome.seconds)
        if outcome.ok:
            m.route_changes.labels("added").inc(outcome.added)
            m.route_changes.labels("removed").inc(outcome.removed)
            m.route_changes.labels("replaced").inc(outcome.replaced)
        m.owned.set(outcome.owned)
        m.skipped.set(len(outcome.skipped))

    # ------------------------------------------------------------------ apply

    def handle(self, config: CongestionConfig) -> ApplyStatus:
        """Verify and apply one config; returns the status to report."""
        signature_error = None
        if config.signature:
            try:
                verify(config, self.public_key)
            except SignatureError as exc:
                signature_error = str(exc)
        verdict = check_config(
            config,
            pop=self.pop,
            host=self.host,
            signature_error=signature_error,
            applied_version=self.state.version,
            applied_signature=self.state.signature,
        )
        if verdict.action == ACCEPT:
            try:
                wanted = parse_wanted(config, available_congestion_controls())
            except InvalidConfig as exc:
                verdict = Verdict(REFUSE, "invalid", str(exc))
        if verdict.action == REFUSE:
            self.metrics.configs.labels("refused").inc()
            self.metrics.refused.labels(verdict.reason).inc()
            log.warning(
                "refused config for POP %r v%d: %s (nothing changed; in force: v%d)",
                config.pop,
                config.version,
                verdict.detail,
                self.state.version,
            )
            return self.status(config.version, ApplyStatus.REFUSED, None, [f"refused: {verdict.detail}"])
        if verdict.action == IGNORE:
            self.metrics.configs.labels("ignored").inc()
            log.info("ignored config v%d: %s (v%d stays in force)", config.version, verdict.detail, self.state.version)
            note = [f"ignored: {verdict.detail}"]
            return self.status(self.state.version, ApplyStatus.UNCHANGED, None, note)
        if verdict.action != ACCEPT:  # same version again (e.g. re-read from Kafka): just reconcile
            self.metrics.configs.labels("unchanged").inc()
            status = self.reconcile("unchanged-config")
            if status.result == ApplyStatus.APPLIED:
                status.result = ApplyStatus.UNCHANGED
            return status
        outcome = self.applier.apply(wanted)
        self._observe(outcome)
        label = "kill switch" if not wanted else f"{len(wanted)} prefixes"
        if not outcome.ok:
            self.metrics.configs.labels("failed").inc()
            log.error(
                "apply v%d (%s) FAILED, previous owned set restored (v%d in force): %s",
                config.version,
                label,
                self.state.version,
                "; ".join(outcome.errors)[:500],
            )
            return self.status(config.version, ApplyStatus.FAILED_ROLLED_BACK, outcome, [])
        errors: list[str] = []
        try:
            self.state.save(config)
        except OSError as exc:
            errors.append(f"applied but state not saved: {exc}")
            log.error("applied v%d but could not save state in %s: %s", config.version, self.state.directory, exc)
            self.state.version, self.state.config = int(config.version), config
        self.wanted = wanted
        self.metrics.configs.labels("applied").inc()
        self.metrics.applied_version.set(self.state.version)
        log.info("applied v%d (%s): %s", config.version, label, outcome.summary())
        return self.status(config.version, ApplyStatus.APPLIED, outcome, errors)

    def _follow_owned(self) -> Mapping[str, Wanted]:
        """No config known: keep the owned routes (with an algorithm) and let them follow nexthops."""
        return self.applier.in_force()

    def close(self) -> None:
        """Release the applier's handles (enforcement stays in place)."""
        self.applier.close()

    def reconcile(self, trigger: str) -> ApplyStatus:
        wanted = self.wanted if self.wanted is not None else self._follow_owned()
        outcome = self.applier.apply(wanted)
        self._observe(outcome)
        result = "ok" if outcome.ok else "failed"
        self.metrics.reconciles.labels(trigger, result).inc()
        if outcome.ok:
            log.info("reconcile (%s) v%d: %s", trigger, self.state.version, outcome.summary())
        else:
            log.error(
                "reconcile (%s) v%d FAILED, owned set restored: %s",
                trigger,
                self.state.version,
                "; ".join(outcome.errors)[:500],
            )
        code = ApplyStatus.APPLIED if outcome.ok and outcome.changes else ApplyStatus.UNCHANGED
        if not outcome.ok:
            code = ApplyStatus.FAILED_ROLLED_BACK
        return self.status(self.state.version, code, outcome, [])
