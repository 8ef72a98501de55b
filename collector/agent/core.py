"""The edge agent's decisions wired to its enforcement I/O (no Kafka here).

`Agent.handle(config)` verifies a CongestionConfig (signature, POP, version, age,
entries), drops the prefixes this edge refuses (`EdgePolicy`: built-in ranges, --deny,
outside --allow; one log line per config names them, dyncc_agent_prefix_refusals_total counts
each, dyncc_agent_refused_prefixes holds those of the config in force, the status names them,
and they get no route), applies the rest all-or-nothing (as routes, or with `applier=` another
enforcement mode such as collector/agent/bpf/apply.py), persists it, and
returns the ApplyStatus to report.  After an applied config, the connections already
open follow it (collector/agent/bpf/iterate.py, a BPF TCP iterator): in the bpf mode on every
change, in the route mode on the kill switch; the count is in the log line and the
dyncc_agent_open_connections counter.  In the route mode, the open connections a config moves
off BBR keep BBR until they close (collector/agent/lingering.py): they are counted after every
apply and reconcile (dyncc_agent_reverted_bbr_connections, one log line while any remain).
`Agent.reconcile(reason)` re-applies the config in force so owned routes follow their covering routes and stale ones go
(in the bpf mode: the maps equal the config and the program is attached).
Both log one line and update the per-instance Prometheus registry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from collector.agent.apply import Applier, ApplyOutcome, RouteApplier
from collector.agent.bpf.iterate import OpenConnections, SwitchReport
from collector.agent.health import available_congestion_controls, read_health
from collector.agent.lingering import count_on_bbr, reverted
from collector.agent.plan import (
    ACCEPT,
    IGNORE,
    REFUSAL_REASONS,
    REFUSE,
    EdgePolicy,
    InvalidConfig,
    Verdict,
    Wanted,
    check_config,
    parse_wanted,
)
from collector.agent.routes import RouteTable
from collector.agent.state import AgentState
from schemas.congestion_pb2 import ApplyStatus, CongestionConfig
from schemas.signing import KeySet, SignatureError, verify

log = logging.getLogger("dyncc.agent")
MAX_STATUS_ERRORS = 50


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.configs = Counter("dyncc_agent_configs", "configs handled, by result", ["result"], registry=r)
        for result in ("applied", "failed", "refused", "ignored", "unchanged"):
            self.configs.labels(result)  # at 0 from the start: alerts see the first failure as an increase
        self.refused = Counter("dyncc_agent_configs_refused", "configs refused, by reason", ["reason"], registry=r)
        for reason in ("unsigned", "bad_signature", "wrong_pop", "stale", "too_old", "invalid"):  # plan.py
            self.refused.labels(reason)
        self.refused_prefixes = Gauge(
            "dyncc_agent_refused_prefixes",
            "prefixes of the config in force this edge refuses to route (no route: built-in range, --deny, "
            "outside --allow), by reason",
            ["reason"],
            registry=r,
        )
        self.prefix_refusals = Counter(
            "dyncc_agent_prefix_refusals",
            "prefixes refused to route (one per prefix of each config this process took: the stored one at "
            "start, then each new one), by reason",
            ["reason"],
            registry=r,
        )
        for reason in REFUSAL_REASONS:
            self.refused_prefixes.labels(reason)
            self.prefix_refusals.labels(reason)
        self.reconciles = Counter(
            "dyncc_agent_reconciles", "reconciles, by trigger and result", ["trigger", "result"], registry=r
        )
        self.route_changes = Counter("dyncc_agent_route_changes", "owned route writes, by kind", ["kind"], registry=r)
        self.owned = Gauge("dyncc_agent_owned_routes", "routes owned by this agent", registry=r)
        self.skipped = Gauge("dyncc_agent_skipped_prefixes", "desired prefixes not installed", registry=r)
        self.applied_version = Gauge("dyncc_agent_applied_version", "config version in force", registry=r)
        self.received_version = Gauge(
            "dyncc_agent_received_version",
            "newest config version for this host that passed the signature, POP and version checks "
            "(applied or not; above dyncc_agent_applied_version = a stale config in force)",
            registry=r,
        )
        self.kill_switch = Gauge(
            "dyncc_agent_kill_switch", "1 while the config in force is a kill switch (nothing on BBR)", registry=r
        )
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
        self.open_connections = Counter(
            "dyncc_agent_open_connections",
            "open connections the TCP iterator switched (switched) or could not switch (failed) after a config change",
            ["result"],
            registry=r,
        )
        self.open_runs = Counter(
            "dyncc_agent_open_connection_runs",
            "TCP iterator runs after a config change, by result (ok, failed, unavailable)",
            ["result"],
            registry=r,
        )
        self.lingering_bbr = Gauge(
            "dyncc_agent_reverted_bbr_connections",
            "route mode: open connections still on BBR to prefixes a config moved off BBR (they keep it "
            "until they close), counted after each apply and reconcile",
            registry=r,
        )
        for result in ("switched", "failed"):
            self.open_connections.labels(result)
        for result in ("ok", "failed", "unavailable"):
            self.open_runs.labels(result)


class Agent:
    def __init__(
        self,
        *,
        pop: str,
        host: str,
        netns: str | None,
        public_key: Ed25519PublicKey | KeySet,  # a KeySet: every key trusted during a rotation
        state: AgentState,
        table: RouteTable | None = None,
        metrics: AgentMetrics | None = None,
        applier: Applier | None = None,
        open_connections: OpenConnections | Literal["build"] | None = "build",
        policy: EdgePolicy | None = None,
        max_config_age: float = 0.0,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        """`open_connections`: "build" compiles the TCP iterator into STATE_DIR/bpf now (without the
        toolchain the agent says so when open connections would have moved); None never touches
        open connections."""
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
        self.policy = policy or EdgePolicy()
        self.max_config_age_ns = int(max_config_age * 1e9)
        self.clock = clock
        self.wanted: dict[str, Wanted] | None = None
        self.refused: dict[str, tuple[str, str]] = {}  # prefixes of the config in force this edge refuses
        self.lingering: set[str] = set()  # route mode: reverted prefixes that had open BBR connections
        self.lingering_count = 0  # and their open BBR connections at the last count
        self.metrics.applied_version.set(state.version)
        if open_connections == "build":
            mode = "route" if isinstance(self.applier, RouteApplier) else "bpf"
            open_connections = OpenConnections.for_agent(mode, netns, state.directory / "bpf")
            if not open_connections.available:
                log.warning(
                    "open connections will keep their algorithm on a %s: %s",
                    "kill switch" if mode == "route" else "config change",
                    open_connections.unavailable,
                )
        self.open_connections: OpenConnections | None = open_connections
        self.metrics.received_version.set(state.version)
        self.metrics.kill_switch.set(int(state.config is not None and state.config.kill_switch))
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
            wanted = parse_wanted(config, None)
        except (SignatureError, InvalidConfig) as exc:
            log.error("stored config v%d is not usable (%s): keeping owned routes as they are", config.version, exc)
            return None
        kept, refused = self._refuse_prefixes(config.version, wanted)
        self._in_force_refused(refused)
        return kept

    def _in_force_refused(self, refused: dict[str, tuple[str, str]]) -> None:
        self.refused = refused
        for reason in REFUSAL_REASONS:
            self.metrics.refused_prefixes.labels(reason).set(sum(1 for r, _ in refused.values() if r == reason))

    def _refuse_prefixes(
        self, version: int, wanted: dict[str, Wanted]
    ) -> tuple[dict[str, Wanted], dict[str, tuple[str, str]]]:
        """`wanted` split into what this edge routes and what it refuses (logged: one line)."""
        kept, refused = self.policy.split(wanted)
        for reason, _ in refused.values():
            self.metrics.prefix_refusals.labels(reason).inc()
        if refused:
            shown = "; ".join(why for _, why in list(refused.values())[:5])
            more = f" (+{len(refused) - 5} more)" if len(refused) > 5 else ""
            log.warning(
                "config v%d: %d of %d prefixes refused by this edge, no route for them (their traffic stays "
                "on its covering route): %s%s",
                version,
                len(refused),
                len(wanted),
                shown,
                more,
            )
        return kept, refused

    # ----------------------------------------------------------------- status

    def status(
        self,
        version: int,
        result: int,
        outcome: ApplyOutcome | None,
        errors: list[str],
        refused: Mapping[str, tuple[str, str]] | None = None,
    ) -> ApplyStatus:
        """The ApplyStatus to report; with an outcome its errors name the refused prefixes (`refused`,
        default: those of the config in force) and the skipped ones."""
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
            shown = self.refused if refused is None else refused
            errors.extend(f"refused {p}: {why}" for p, (_, why) in sorted(shown.items()))
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
            now_ns=self.clock(),
            max_age_ns=self.max_config_age_ns,
        )
        if verdict.action == ACCEPT:
            self.metrics.received_version.set(config.version)
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
        wanted, refused = self._refuse_prefixes(config.version, wanted)
        before = self._in_force_before(wanted)
        previous = self._route_in_force()
        outcome = self.applier.apply(wanted)
        self._observe(outcome)
        label = "kill switch" if config.kill_switch else f"{len(wanted)} prefixes"
        if not outcome.ok:
            self.metrics.configs.labels("failed").inc()
            log.error(
                "apply v%d (%s) FAILED, previous owned set restored (v%d in force): %s",
                config.version,
                label,
                self.state.version,
                "; ".join(outcome.errors)[:500],
            )
            return self.status(config.version, ApplyStatus.FAILED_ROLLED_BACK, outcome, [], refused)
        errors: list[str] = []
        try:
            self.state.save(config)
        except OSError as exc:
            errors.append(f"applied but state not saved: {exc}")
            log.error("applied v%d but could not save state in %s: %s", config.version, self.state.directory, exc)
            self.state.version, self.state.config = int(config.version), config
        self.wanted = wanted
        self._in_force_refused(refused)
        self.metrics.configs.labels("applied").inc()
        self.metrics.applied_version.set(self.state.version)
        self.metrics.kill_switch.set(int(config.kill_switch))
        report = self._follow_open(before, wanted)
        if previous is not None:
            self.lingering |= reverted(previous, wanted)
            self._count_lingering(wanted)
        opened = f"; {report.summary()}" if report is not None and report.ok else ""  # else: a warning line
        log.info("applied v%d (%s): %s%s", config.version, label, outcome.summary(), opened)
        if report is not None and report.error:
            errors.append(report.summary())
        return self.status(config.version, ApplyStatus.APPLIED, outcome, errors)

    # ------------------------------------------------------- open connections

    def _in_force_before(self, wanted: Mapping[str, Wanted]) -> Mapping[str, Wanted] | None:
        """What enforcement does before applying `wanted`, when open connections may have to follow."""
        follower = self.open_connections
        if follower is None or (follower.mode == "route" and wanted):
            return None  # the route mode follows only the kill switch
        try:
            return self.applier.in_force()
        except OSError as exc:
            log.warning("cannot read what is in force (%s): open connections follow the stored config", exc)
            return self.wanted or {}

    def _follow_open(self, before: Mapping[str, Wanted] | None, after: Mapping[str, Wanted]) -> SwitchReport | None:
        """Move the open connections the applied change asks for (after the apply: new ones are covered)."""
        if self.open_connections is None or before is None:
            return None
        report = self.open_connections.follow(before, after)
        if report is None:
            return None
        m = self.metrics
        if report.error:
            m.open_runs.labels("unavailable" if not self.open_connections.available else "failed").inc()
            log.warning("%s", report.summary())
        else:
            m.open_runs.labels("ok").inc()
        m.open_connections.labels("switched").inc(report.switched)
        m.open_connections.labels("failed").inc(report.failed)
        return report

    def _route_in_force(self) -> Mapping[str, Wanted] | None:
        """Route mode: what is in force before an apply (None in another mode)."""
        if not isinstance(self.applier, RouteApplier):
            return None
        if self.wanted is not None:
            return self.wanted
        try:
            return self.applier.in_force()
        except OSError:
            return {}

    def _count_lingering(self, wanted: Mapping[str, Wanted]) -> None:
        """Route mode: count the open connections still on BBR to prefixes moved off BBR (a route's
        congctl covers new connections only), set the gauge, log them; forget prefixes with none."""
        self.lingering = {p for p in self.lingering if p not in wanted or wanted[p].algorithm != "bbr"}
        if not self.lingering:
            self.metrics.lingering_bbr.set(0)
            self.lingering_count = 0
            return
        try:
            counts = count_on_bbr(self.netns, self.lingering)
        except OSError as exc:
            log.warning("cannot count the open BBR connections of reverted prefixes: %s", exc)
            return
        left = {p: n for p, n in counts.items() if n}
        self.metrics.lingering_bbr.set(sum(left.values()))
        if left:
            named = ", ".join(f"{p} {n}" for p, n in sorted(left.items(), key=lambda kv: -kv[1])[:5])
            log.info(
                "route mode: %d open connections of %d prefixes moved off BBR stay on BBR until they close (%s%s)",
                sum(left.values()),
                len(left),
                named,
                ", ..." if len(left) > 5 else "",
            )
        elif self.lingering_count:
            log.info("route mode: no open connection of a prefix moved off BBR is on BBR any more")
        self.lingering, self.lingering_count = set(left), sum(left.values())

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
        if self.lingering:
            self._count_lingering(wanted)
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
