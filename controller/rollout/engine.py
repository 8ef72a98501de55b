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

from controller.rollout import records as rs
from controller.rollout.engine_config import RolloutConfig, StepCounters
from controller.rollout.generate import (
    ConfigDiff,
    build_config,
    diff_entries,
    fingerprint,
    generate,
    kill_switch_config,
)
from controller.rollout.signing import Signer
from controller.rollout.sinks import ConfigSink, PublishError, config_key
from controller.rollout.state import (
    CANARY,
    IDLE,
    KILLED,
    REST,
    HostReport,
    RolloutState,
    WindowStats,
    available_algorithms,
    check_wave,
    choose_canary,
    judge_p10,
    known_hosts,
    soak_remaining_ns,
)
from controller.rollout.toggles import Toggles, TrialToggles
from controller.rollout.validate import ValidationPolicy, validate
from controller.scoring.desired import DesiredState
from controller.store import Store
from controller.store.outcomes import PUBLISH_FAILED, PUBLISHED, REJECTED
from schemas.congestion_pb2 import CongestionConfig, PrefixEntry

log = logging.getLogger("dyncc.rollout")


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
        self.toggles = TrialToggles(store, lock=config.lock)

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
            if state.phase in (CANARY, REST):  # toggles never wait for a wave
                return self._toggle_in_wave(state, desired, latest, now) if desired is not None else state
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
        toggle = bool(self.config.staging and hosts) and self.toggles.only_toggles(pop, desired, diff)
        if self.config.staging and hosts and not toggle:
            # a change that mixes trial toggles with prefixes a canary must see: the toggles go
            # POP-wide first, then the rest starts its canary in the same round (neither waits)
            found = self.toggles.find(pop, desired, stable, now=now)
            if found:
                split = self._publish_toggles(state, found, stable, last, latest, now, desired.round_id)
                if split is None:
                    return state
                state, stable, last = split, found.applied(stable), last + 1
                config = generate(desired, last + 1, created_at_ns=now, lock=self.config.lock)
                diff, fp = diff_entries(stable, config.entries), fingerprint(config.entries)
        reasons = validate(
            config,
            previous=stable,
            last_version=last,
            available=available_algorithms(latest),
            policy=self.policy,
            toggles=self.toggles.toggled(pop, desired, diff),
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

    def _publish_toggles(
        self,
        state: RolloutState,
        found: Toggles,
        base: list[PrefixEntry],
        last: int,
        latest: Mapping[str, HostReport],
        now: int,
        round_id: str,
    ) -> RolloutState | None:
        """Publish `base` with the toggles applied POP-wide as the next version, the stable config
        (None: validation refused it, recorded)."""
        config = build_config(state.pop, last + 1, found.applied(base), created_at_ns=now, round_id=round_id)
        diff = diff_entries(base, config.entries)
        reasons = validate(
            config, previous=base, last_version=last, available=available_algorithms(latest),
            policy=self.policy, toggles=found.prefixes,
        )  # fmt: skip
        if reasons:
            self._reject(config, "candidate", diff, reasons)
            return None
        self._publish(config, "full", diff)
        log.info(
            "%s: v%d (%s) published to the whole POP (a trial's switchback toggle of prefixes that "
            "already passed a canary)", state.pop, config.version, diff.summary(),
        )  # fmt: skip
        return self._save_full(state, config, fingerprint(config.entries), now, "trial toggles published POP-wide")

    def wave_base(self, state: RolloutState) -> tuple[list[PrefixEntry], frozenset[str]]:
        """During a wave: the config in force POP-wide (the stable one in a canary, the candidate in
        a rest wave) and the prefixes the wave itself changes (left to it)."""
        stable = self._entries(state.pop, state.stable_version)
        candidate = self._entries(state.pop, state.candidate_version)
        if state.phase == CANARY:
            return stable, frozenset(diff_entries(stable, candidate).prefixes)
        return candidate, frozenset()

    def wave_holds(self, state: RolloutState, desired: DesiredState) -> bool:
        """During a wave: whether it holds the round.  Not when the desired state differs from the
        config in force POP-wide only in the wave's own prefixes and in trial prefixes (their
        toggles went out; a trial's first ask that waits for a canary of its own is a bucket the
        evidence does not count, being realized on the other arm): a trial's round then counts.
        It does when a toggle could not go out or any other change waits for the wave."""
        base, exclude = self.wave_base(state)
        wanted = generate(desired, 0, created_at_ns=0, lock=self.config.lock).entries
        waiting = set(diff_entries(base, wanted).prefixes) - exclude
        if waiting - set(desired.trial_prefixes):
            return True
        return bool(self.toggles.find(state.pop, desired, base, now=self.clock(), exclude=exclude))

    def _toggle_in_wave(
        self, state: RolloutState, desired: DesiredState, latest: Mapping[str, HostReport], now: int
    ) -> RolloutState:
        """A wave is in flight: publish the desired state's trial toggles now, not after the wave.

        Canary: the stable config with the toggles goes POP-wide (the new stable), and the
        candidate with the same toggles to the wave's hosts (the new candidate); the prefixes the
        wave changes are left to it, and the wave's gates still count from its start (a report of
        a later version is a report of the wave).  Rest wave: the candidate with the toggles goes
        POP-wide, and is what becomes stable when the wave completes."""
        pop, canary = state.pop, state.phase == CANARY
        candidate = self._entries(pop, state.candidate_version)
        base, exclude = self.wave_base(state)
        found = self.toggles.find(pop, desired, base, now=now, exclude=exclude)
        if not found:
            return state
        last = rs.last_version(self.store, pop)
        full = build_config(pop, last + 1, found.applied(base), created_at_ns=now, round_id=desired.round_id)
        configs = [(full, base, "full")]
        if canary:
            wave = build_config(pop, last + 2, found.applied(candidate), created_at_ns=now, round_id=desired.round_id)
            wave.target_hosts.extend(state.wave_hosts)
            configs.append((wave, candidate, "canary"))
        available = available_algorithms(latest)
        for config, previous, kind in configs:  # both validated before either is published
            reasons = validate(
                config, previous=previous, last_version=config.version - 1, available=available,
                policy=self.policy, toggles=found.prefixes,
            )  # fmt: skip
            if reasons:
                self._reject(config, kind, diff_entries(previous, config.entries), reasons)
                return state
        for config, previous, kind in configs:
            self._publish(config, kind, diff_entries(previous, config.entries), canary=kind == "canary")
        newest = configs[-1][0]
        log.info(
            "%s: %s wave v%d in flight; trial toggles (%d prefixes) published as v%d to the whole POP%s",
            pop, state.phase, state.wave_version, len(found.prefixes), full.version,
            f" and as v{newest.version} to the wave's hosts" if canary else "",
        )  # fmt: skip
        changes: dict[str, object] = {"candidate_version": newest.version}
        if canary:
            changes["stable_version"] = full.version
        return self._save(
            state, event="toggle", candidate_fingerprint=fingerprint(newest.entries),
            reason=f"trial toggles of {len(found.prefixes)} prefixes during the {state.phase} wave", **changes,
        )  # fmt: skip

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
                # the promoted config, or the later one a toggle published during the wave
                stable_version=max(state.wave_version, state.candidate_version),
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
