"""The rollout engine: one step per POP per round — generate, validate, sign, publish, gate.

Drives the state machine described in controller/rollout/state.py with the
store (controller/rollout/records.py) and a config sink
(controller/rollout/sinks.py).  Every config that leaves here was validated
(controller/rollout/validate.py) and signed; every config generated is
recorded in config_versions (published / rejected with its reasons /
publish_failed); every transition is a rollout_waves row, so a restarted
controller continues where it stopped.

Versions: next = max(last version published for the POP, highest version its
agents report in force) + 1; rejected configs do not consume a number.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from controller.rollout import records as rs
from controller.rollout.generate import (
    ConfigDiff,
    build_config,
    diff_entries,
    fingerprint,
    generate,
    kill_switch_config,
)
from controller.rollout.settings import RolloutSettings
from controller.rollout.signing import Signer
from controller.rollout.sinks import ConfigSink, PublishError, config_key
from controller.rollout.state import (
    CANARY,
    IDLE,
    KILLED,
    REST,
    GateThresholds,
    HostReport,
    RolloutState,
    WindowStats,
    available_algorithms,
    check_wave,
    choose_canary,
    judge_p10,
    known_hosts,
    seconds_to_ns,
    soak_remaining_ns,
)
from controller.rollout.validate import ValidationPolicy, validate
from controller.scoring.desired import DesiredState
from controller.store import Store
from controller.store.outcomes import PUBLISH_FAILED, PUBLISHED, REJECTED
from schemas.congestion_pb2 import CongestionConfig, PrefixEntry

log = logging.getLogger("dyncc.rollout")

TOGGLE_HISTORY = 32  # config versions looked at for a trial prefix's earlier POP-wide publish


@dataclass
class RolloutConfig:
    """What the engine takes: the staged-rollout part of RolloutSettings, durations in ns
    (defaults: the table's; `staging` is the table's auto|on|off already decided)."""

    thresholds: GateThresholds = field(default_factory=GateThresholds)
    canary_fraction: float = RolloutSettings.canary_fraction
    canary_hosts: Mapping[str, Sequence[str]] = field(default_factory=dict)
    inventory: Mapping[str, Sequence[str]] = field(default_factory=dict)
    host_expiry_ns: int = seconds_to_ns(RolloutSettings.host_expiry)
    holddown_ns: int = seconds_to_ns(RolloutSettings.holddown)
    republish_after_ns: int = seconds_to_ns(RolloutSettings.republish_after)
    staging: bool = True
    lock: bool = RolloutSettings.lock_cc

    @classmethod
    def from_settings(cls, settings: RolloutSettings) -> RolloutConfig:
        """Reads --inventory when given (ConfigError)."""
        hosts, canary = settings.host_lists()
        return cls(
            thresholds=GateThresholds.from_settings(settings),
            canary_fraction=settings.canary_fraction,
            canary_hosts=canary,
            inventory=hosts,
            host_expiry_ns=seconds_to_ns(settings.host_expiry),
            holddown_ns=seconds_to_ns(settings.holddown),
            republish_after_ns=seconds_to_ns(settings.republish_after),
            staging=settings.staging == "on" or (settings.staging == "auto" and bool(settings.kafka)),
            lock=settings.lock_cc,
        )


@dataclass
class StepCounters:
    published: dict[str, int] = field(default_factory=dict)  # kind -> count
    rejected: int = 0
    rollbacks: int = 0

    def count(self, kind: str) -> None:
        self.published[kind] = self.published.get(kind, 0) + 1


class RolloutEngine:
    def __init__(
        self,
        store: Store,
        sink: ConfigSink,
        signer: Signer,
        policy: ValidationPolicy,
        config: RolloutConfig,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.store = store
        self.sink = sink
        self.signer = signer
        self.policy = policy
        self.config = config
        self.clock = clock
        self.counters = StepCounters()

    # -- helpers -----------------------------------------------------------------------------

    def _entries(self, pop: str, version: int) -> list[PrefixEntry]:
        if version == 0:
            return []
        config = rs.load_published_config(self.store, pop, version)
        if config is None:
            raise PublishError(f"{pop}: published config v{version} not found in config_versions")
        return list(config.entries)

    def _save(self, state: RolloutState, **changes: object) -> RolloutState:
        # strictly after the state it follows: one step may save twice (a wave completes, the next
        # canary starts) on one clock reading (the lab's round clock), and the latest row is the
        # state (sql/queries/rollout_state_latest.sql orders by updated_ns)
        new = state.moved(updated_ns=max(self.clock(), state.updated_ns + 1), **changes)
        rs.save_state(self.store, new)
        return new

    def _record(
        self, config: CongestionConfig, status: str, kind: str, diff: ConfigDiff, reasons: Sequence[str] = ()
    ) -> None:
        rs.record_config(
            self.store,
            rs.ConfigRecord(
                pop=config.pop,
                version=config.version,
                status=status,
                kind=kind,
                config=config,
                created_ns=self.clock(),
                added=len(diff.added),
                removed=len(diff.removed),
                changed=len(diff.changed),
                reasons=list(reasons),
                fingerprint=fingerprint(config.entries),
            ),
        )

    def _reject(self, config: CongestionConfig, kind: str, diff: ConfigDiff, reasons: list[str]) -> None:
        self._record(config, REJECTED, kind, diff, reasons)
        self.counters.rejected += 1
        log.warning(
            "%s: %s config v%d REJECTED, not published: %s", config.pop, kind, config.version, "; ".join(reasons)
        )

    def _publish(self, config: CongestionConfig, kind: str, diff: ConfigDiff, canary: bool = False) -> None:
        """Sign, send, record.  A failed send is recorded (the number stays used) and raised."""
        self.signer.sign(config)
        try:
            self.sink.publish(config_key(config.pop, canary), config)
        except PublishError as exc:
            self._record(config, PUBLISH_FAILED, kind, diff, [str(exc)])
            raise
        self._record(config, PUBLISHED, kind, diff)
        self.counters.count(kind)

    def _reports(self, pop: str, now: int) -> dict[str, HostReport]:
        return rs.latest_reports(self.store, pop, now - self.config.host_expiry_ns)

    def _hosts(self, pop: str, latest: Mapping[str, HostReport]) -> list[str]:
        return known_hosts(latest, self.config.inventory.get(pop, ()))

    # -- one round for one POP ----------------------------------------------------------------

    def step(self, pop: str, desired: DesiredState | None) -> RolloutState:
        now = self.clock()
        state = rs.load_state(self.store, pop)
        if state.phase == KILLED:
            log.warning(
                "%s: kill switch engaged (v%d); nothing published until 'dyncc control kill-switch --release --pop %s'",
                pop,
                state.stable_version,
                pop,
            )
            return state
        latest = self._reports(pop, now)
        if state.phase in (CANARY, REST):
            state = self._advance(state, latest, now)
            if state.phase != IDLE:
                return state
        if desired is None:
            return state
        return self._start(state, desired, latest, now)

    def _start(
        self, state: RolloutState, desired: DesiredState, latest: Mapping[str, HostReport], now: int
    ) -> RolloutState:
        pop = state.pop
        stable = self._entries(pop, state.stable_version)
        last = rs.last_version(self.store, pop)
        config = generate(desired, last + 1, created_at_ns=now, lock=self.config.lock)
        diff = diff_entries(stable, config.entries)
        fp = fingerprint(config.entries)
        if diff.total == 0 and len({e.prefix for e in config.entries}) == len(config.entries):
            why = self._resign_reason(pop, state.stable_version, now)
            if why:
                return self._resign(state, config, diff, fp, latest, why)
            log.info(
                "%s: desired state unchanged (%d prefixes, stable v%d); nothing to publish",
                pop,
                len(config.entries),
                state.stable_version,
            )
            return state
        if fp == state.failed_fingerprint and now - state.failed_at_ns < self.config.holddown_ns:
            left = (state.failed_at_ns + self.config.holddown_ns - now) / 1e9
            log.warning(
                "%s: desired state equals the one rolled back %.0fs ago; held down %.0fs more",
                pop,
                (now - state.failed_at_ns) / 1e9,
                left,
            )
            return state
        hosts = self._hosts(pop, latest)
        toggle = bool(self.config.staging and hosts) and self._trial_toggle(pop, desired, diff)
        if self.config.staging and hosts and not toggle:
            # a change that mixes trial toggles with prefixes a canary must see: the toggles go
            # POP-wide now, the rest waits for the next round (so toggles never wait for a wave)
            split = self._toggles_only(pop, desired, stable, diff, last + 1, now)
            if split is not None:
                config, diff, toggle = split, diff_entries(stable, split.entries), True
                fp = fingerprint(config.entries)
        reasons = validate(
            config,
            previous=stable,
            last_version=last,
            available=available_algorithms(latest),
            policy=self.policy,
            toggles=self._toggled(pop, desired, diff),
        )
        if reasons:
            self._reject(config, "candidate", diff, reasons)
            return state
        if self.config.staging and hosts and not toggle:
            canary = choose_canary(pop, hosts, self.config.canary_hosts.get(pop, ()), self.config.canary_fraction)
            config.target_hosts.extend(canary)
            self._publish(config, "canary", diff, canary=True)
            log.info(
                "%s: canary v%d (%s) to %d of %d hosts: %s",
                pop,
                config.version,
                diff.summary(),
                len(canary),
                len(hosts),
                ", ".join(canary),
            )
            return self._save(
                state,
                phase=CANARY,
                event="canary",
                rollout_id=f"{pop}-v{config.version}",
                candidate_version=config.version,
                wave_version=config.version,
                wave_hosts=tuple(canary),
                wave_started_ns=now,
                candidate_fingerprint=fp,
                reason=f"canary {diff.summary()} to {', '.join(canary)}",
            )
        self._publish(config, "full", diff)
        why = "no known hosts" if not hosts else "staging off"
        if toggle:
            why = "a trial's switchback toggle of prefixes that already passed a canary"
        log.info("%s: v%d (%s) published to the whole POP (%s)", pop, config.version, diff.summary(), why)
        return self._save_full(state, config, fp, now, f"published to the whole POP ({why})")

    def _save_full(
        self, state: RolloutState, config: CongestionConfig, fp: str, started_ns: int, reason: str
    ) -> RolloutState:
        """The state after `config` went to the whole POP at once: it is the stable config."""
        return self._save(
            state,
            phase=IDLE,
            event="full",
            rollout_id=f"{state.pop}-v{config.version}",
            stable_version=config.version,
            candidate_version=config.version,
            wave_version=config.version,
            wave_hosts=(),
            wave_started_ns=started_ns,
            candidate_fingerprint=fp,
            reason=reason,
        )

    def _resign_reason(self, pop: str, version: int, now: int) -> str:
        """Why the unchanged stable config `version` must be published again ('' = it need not): it
        was signed by another key, or it is --republish-after old (agents refuse one older than their
        --max-config-age, docs/security.md)."""
        config = rs.load_published_config(self.store, pop, version) if version else None
        if config is None:
            return ""
        if config.key_id != self.signer.key_id:
            return "key rotation"
        age = now - int(config.created_at_ns)
        if age >= self.config.republish_after_ns:
            return f"signed {age / 3.6e12:.1f}h ago, --republish-after {self.config.republish_after_ns / 3.6e12:g}h"
        return ""

    def _resign(
        self,
        state: RolloutState,
        config: CongestionConfig,
        diff: ConfigDiff,
        fp: str,
        latest: Mapping[str, HostReport],
        why: str,
    ) -> RolloutState:
        """The desired state is the config in force, but that was signed by another key (the controller
        switched keys: a key rotation, docs/rollout.md) or is --republish-after old: publish it again
        POP-wide, newly signed, so no agent depends on the old key once it is removed and no agent
        refuses it as too old (no canary: no prefix changes)."""
        pop, stable_version = state.pop, state.stable_version
        reasons = validate(
            config, previous=self._entries(pop, stable_version), last_version=config.version - 1,
            available=available_algorithms(latest), policy=self.policy,
        )  # fmt: skip
        if reasons:
            self._reject(config, "full", diff, reasons)
            return state
        self._publish(config, "full", diff)
        log.info(
            "%s: v%d = stable v%d re-signed with key %s (%s)", pop, config.version, stable_version, config.key_id, why
        )
        reason = f"stable v{stable_version} re-signed with key {config.key_id} ({why})"
        return self._save_full(state, config, fp, config.created_at_ns, reason)

    def _toggles_only(
        self, pop: str, desired: DesiredState, stable: list[PrefixEntry], diff: ConfigDiff, version: int, now: int
    ) -> CongestionConfig | None:
        """The stable config with only the change's validated trial toggles applied (removals of
        trial prefixes, and additions of trial prefixes already on BBR POP-wide in their trial),
        or None when there are none."""
        trials = desired.trial_prefixes
        if not trials:
            return None
        wanted = {e.prefix: e for e in generate(desired, version, created_at_ns=now, lock=self.config.lock).entries}
        removed = [p for p in diff.removed if p in trials]
        on = [p for p in (*diff.added, *diff.changed) if p in trials]
        validated = self._validated(pop, set(on), trials) if on else set()
        if not removed and not validated:
            return None
        entries = {e.prefix: e for e in stable}
        for p in removed:
            entries.pop(p, None)
        for p in validated:
            entries[p] = wanted[p]
        return build_config(pop, version, entries.values(), created_at_ns=now, round_id=desired.round_id)

    def _toggled(self, pop: str, desired: DesiredState, diff: ConfigDiff) -> frozenset[str]:
        """The prefixes of `diff` that are switchback toggles (a trial's or a watch's): removals of
        trial prefixes and additions of those on BBR in a POP-wide config since their trial began."""
        trials = desired.trial_prefixes
        if not trials:
            return frozenset()
        removed = {p for p in diff.removed if p in trials}
        on = {p for p in (*diff.added, *diff.changed) if p in trials}
        return frozenset(removed | (self._validated(pop, on, trials) if on else set()))

    def _validated(self, pop: str, needed: set[str], trials: Mapping[str, int]) -> set[str]:
        """Those of `needed` that were on BBR in a POP-wide config since their trial began."""
        seen: set[str] = set()
        for version, status, kind, *_, created_ns in rs.config_history(self.store, pop, limit=TOGGLE_HISTORY):
            if needed <= seen:
                break
            if str(status) != PUBLISHED or str(kind) not in ("full", "promote"):
                continue
            config = rs.load_published_config(self.store, pop, int(version))
            for e in config.entries if config is not None else ():
                if e.prefix in needed and int(created_ns) >= trials[e.prefix]:
                    seen.add(e.prefix)
        return seen

    def _trial_toggle(self, pop: str, desired: DesiredState, diff: ConfigDiff) -> bool:
        """Whether the change only toggles trial prefixes, and each prefix it puts on BBR was on
        BBR in a POP-wide config (a promotion or a full publish) since its trial began: such a
        change needs no canary wave of its own (a removal returns to the default)."""
        trials = desired.trial_prefixes
        if not diff.total or not set(diff.prefixes) <= set(trials):
            return False
        needed = set(diff.added) | set(diff.changed)
        return needed <= self._validated(pop, needed, trials) if needed else True

    def _advance(self, state: RolloutState, latest: Mapping[str, HostReport], now: int) -> RolloutState:
        th = self.config.thresholds
        reports = rs.reports_since(self.store, state.pop, state.wave_started_ns)
        canary = state.phase == CANARY
        check = check_wave(
            state.wave_version, state.wave_hosts, state.wave_started_ns, reports, now, th, missing_fails=canary
        )
        wave = "canary" if canary else "rest"
        if check.status == "failed":
            return self._rollback(state, [f"{wave} wave v{state.wave_version} failed: {r}" for r in check.reasons])
        if check.status == "waiting":
            log.info(
                "%s: %s wave v%d waiting for %s (%d/%d reported success)",
                state.pop,
                wave,
                state.wave_version,
                ", ".join(check.missing),
                len(check.succeeded),
                len(state.wave_hosts),
            )
            return state
        if not canary:
            note = f"; no report from {', '.join(check.missing)}" if check.missing else ""
            log.info(
                "%s: rollout v%d complete on %d hosts%s", state.pop, state.wave_version, len(check.succeeded), note
            )
            return self._save(
                state,
                phase=IDLE,
                event="complete",
                stable_version=state.wave_version,
                reason=f"complete on {len(check.succeeded)} hosts{note}",
            )
        remaining = soak_remaining_ns(check, now, th)
        if remaining > 0:
            log.info(
                "%s: canary v%d applied on %s; soaking %.0fs more",
                state.pop,
                state.wave_version,
                ", ".join(sorted(check.succeeded)),
                remaining / 1e9,
            )
            return state
        ok, why = self._judge_delivery(state, check.succeeded, now)
        if not ok:
            return self._rollback(state, [f"canary wave v{state.wave_version} regressed: {why}"])
        return self._promote(state, latest, now, why)

    def _judge_delivery(self, state: RolloutState, succeeded: Mapping[str, HostReport], now: int) -> tuple[bool, str]:
        th = self.config.thresholds
        hosts = sorted(succeeded)
        applied_ns = max((r.reported_ns for r in succeeded.values()), default=state.wave_started_ns)
        before_window = (state.wave_started_ns - th.baseline_ns, state.wave_started_ns)
        after_window = (max(applied_ns, state.wave_started_ns), now)
        stable = self._entries(state.pop, state.stable_version)
        candidate = self._entries(state.pop, state.candidate_version)
        changed = diff_entries(stable, candidate).prefixes

        def windows(prefixes: list[str] | None) -> tuple[WindowStats, WindowStats]:
            return (
                rs.p10_window(self.store, state.pop, hosts, *before_window, prefixes),
                rs.p10_window(self.store, state.pop, hosts, *after_window, prefixes),
            )

        before, after = windows(changed)
        scope = f"{len(changed)} changed prefixes"
        if min(before.samples, after.samples) < th.min_samples:
            before, after = windows(None)
            scope = "all flows"
        ok, why = judge_p10(before, after, th)
        return ok, f"{why} on {', '.join(hosts)} ({scope})"

    def _promote(self, state: RolloutState, latest: Mapping[str, HostReport], now: int, why: str) -> RolloutState:
        pop = state.pop
        stable = self._entries(pop, state.stable_version)
        candidate = self._entries(pop, state.candidate_version)
        last = rs.last_version(self.store, pop)
        config = build_config(
            pop, last + 1, candidate, created_at_ns=now, round_id=f"promote-v{state.candidate_version}"
        )
        diff = diff_entries(stable, config.entries)
        reasons = validate(
            config, previous=stable, last_version=last, available=available_algorithms(latest), policy=self.policy
        )
        if reasons:
            self._reject(config, "promote", diff, reasons)
            return self._rollback(state, [f"promotion of v{state.candidate_version} rejected: {r}" for r in reasons])
        self._publish(config, "promote", diff)
        hosts = tuple(self._hosts(pop, latest))
        log.info(
            "%s: canary v%d passed (%s); promoted as v%d to all %d hosts",
            pop,
            state.candidate_version,
            why,
            config.version,
            len(hosts),
        )
        return self._save(
            state,
            phase=REST,
            event="promote",
            wave_version=config.version,
            wave_hosts=hosts,
            wave_started_ns=now,
            reason=f"canary passed: {why}",
        )

    def _rollback(self, state: RolloutState, reasons: list[str]) -> RolloutState:
        """Re-publish the stable entries POP-wide as a new, higher version."""
        pop = state.pop
        now = self.clock()
        stable = self._entries(pop, state.stable_version)
        candidate = self._entries(pop, state.candidate_version)
        last = rs.last_version(self.store, pop)
        config = build_config(
            pop, last + 1, stable, created_at_ns=now, round_id=f"rollback-of-v{state.candidate_version}"
        )
        diff = diff_entries(candidate, config.entries)
        # The change limit does not apply to going back; structure and deny rules still do.
        problems = validate(config, previous=None, last_version=last, available=None, policy=self.policy)
        if problems:
            self._reject(config, "rollback", diff, problems)
            log.error(
                "%s: ROLLBACK of v%d could not be published (%s); retrying next round — "
                "consider 'dyncc control kill-switch --pop %s'",
                pop,
                state.candidate_version,
                "; ".join(problems),
                pop,
            )
            return self._save(state, event="rollback_rejected", reason="; ".join(reasons + problems))
        self._publish(config, "rollback", diff)
        self.counters.rollbacks += 1
        log.warning(
            "%s: ROLLED BACK v%d -> v%d (= stable v%d, %d prefixes): %s",
            pop,
            state.candidate_version,
            config.version,
            state.stable_version,
            len(stable),
            "; ".join(reasons),
        )
        return self._save(
            state,
            phase=IDLE,
            event="rollback",
            stable_version=config.version,
            wave_version=config.version,
            wave_hosts=(),
            wave_started_ns=now,
            failed_fingerprint=state.candidate_fingerprint,
            failed_at_ns=now,
            reason="; ".join(reasons),
        )

    # -- operator actions ---------------------------------------------------------------------

    def kill(self, pop: str) -> int:
        """Publish an empty signed kill-switch config POP-wide; the POP stays killed until released."""
        now = self.clock()
        state = rs.load_state(self.store, pop)
        last = rs.last_version(self.store, pop)
        config = kill_switch_config(pop, last + 1, created_at_ns=now)
        try:  # informational only: a kill switch must not depend on old records
            previous = self._entries(pop, state.wave_version or state.stable_version)
        except PublishError:
            previous = []
        diff = diff_entries(previous, config.entries)
        reasons = validate(config, previous=None, last_version=last, available=None, policy=self.policy)
        if reasons:
            self._reject(config, "kill_switch", diff, reasons)
            raise PublishError(f"{pop}: kill switch config rejected: {'; '.join(reasons)}")
        self._publish(config, "kill_switch", diff)
        self._save(
            state,
            phase=KILLED,
            event="kill",
            stable_version=config.version,
            wave_version=config.version,
            wave_hosts=(),
            wave_started_ns=now,
            reason="kill switch",
        )
        log.warning("%s: KILL SWITCH v%d published: agents remove every owned route", pop, config.version)
        return config.version

    def release(self, pop: str) -> RolloutState:
        state = rs.load_state(self.store, pop)
        if state.phase != KILLED:
            log.info("%s: kill switch not engaged (phase %s); nothing to release", pop, state.phase)
            return state
        log.info("%s: kill switch released; the next round rolls the desired state out from empty", pop)
        return self._save(state, phase=IDLE, event="release", reason="kill switch released")
