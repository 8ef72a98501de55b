"""The controller's round loop: `Controller` runs one round (score, decide, record, publish,
metrics, one log line) against one store; `dyncc control` schedules it (controller/control/cli.py)
and the lab runs the very same object on its accelerated clock (dyncc/lab/control.py), so a
round has one code path.  `Metrics` are its Prometheus metrics.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections import Counter as Tally
from typing import TYPE_CHECKING

from controller.rollout.publish import Publisher
from controller.rollout.validate import ValidationPolicy, refusal
from controller.scoring.decide import PopSummary
from controller.scoring.round import RoundResult, run_round
from controller.scoring.state import StateMemo
from controller.store import Store, StoreError
from controller.store.decisions import KEEP, REVERT
from controller.store.outcomes import KILLED, NOT_PUBLISHED, PUBLISH_FAILED, PublishOutcome, write_outcomes

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Gauge

    from controller.control.settings import ControlSettings

log = logging.getLogger("dyncc.control")


class Metrics:
    """The controller's Prometheus metrics on a per-instance registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.rounds = Counter("dyncc_control_rounds", "controller rounds", ["result"], registry=r)
        for result in ("ok", "error", "publish_error"):
            self.rounds.labels(result)  # at 0 from the start: alerts see the first failure as an increase
        self.duration = Histogram(
            "dyncc_control_round_duration_seconds",
            "round duration",
            buckets=(0.5, 1, 2, 5, 10, 30, 60, 120),
            registry=r,
        )

        def per_pop(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, ["pop"], registry=r)

        self.scored = per_pop("dyncc_control_prefixes_scored", "prefixes scored last round")
        self.selected = per_pop("dyncc_control_prefixes_selected", "prefixes on BBR after last round")
        self.new = per_pop("dyncc_control_prefixes_new", "prefixes newly selected last round")
        self.reverted = per_pop("dyncc_control_prefixes_reverted", "prefixes reverted last round")
        self.holdout = per_pop("dyncc_control_prefixes_holdout", "holdout prefixes last round")
        self.new_total = Counter("dyncc_control_selected", "prefixes newly selected", ["pop"], registry=r)
        self.reverted_total = Counter("dyncc_control_reverted", "prefixes reverted", ["pop"], registry=r)
        self.trials = per_pop("dyncc_control_trials", "prefixes in a trial after last round (either arm)")
        self.trial_ends = Counter(
            "dyncc_control_trial_ends",
            "trials ended by their rule (controller/evidence)",
            ["pop", "outcome"],
            registry=r,
        )
        self.outcomes = Counter(
            "dyncc_control_round_outcomes", "per POP and round: what became of the decisions", ["status"], registry=r
        )
        for status in (*NOT_PUBLISHED, KILLED):  # the statuses alerts watch (deploy/prometheus), at 0 from the start
            self.outcomes.labels(status)

    def observe(self, result: RoundResult) -> None:
        self.rounds.labels("ok").inc()
        self.duration.observe(result.seconds)
        for s in result.summaries:
            self.scored.labels(s.pop).set(s.scored)
            self.selected.labels(s.pop).set(s.selected)
            self.new.labels(s.pop).set(s.new)
            self.reverted.labels(s.pop).set(s.reverted)
            self.holdout.labels(s.pop).set(s.holdout)
            self.new_total.labels(s.pop).inc(s.new)
            self.reverted_total.labels(s.pop).inc(s.reverted)
            self.trials.labels(s.pop).set(s.trials)
            self.trial_ends.labels(s.pop, KEEP).inc(s.kept_by_trial)
            self.trial_ends.labels(s.pop, REVERT).inc(s.reverted_by_trial)


def round_line(result: RoundResult, dry_run: bool) -> str:
    """The one log line of a round."""
    s = result.summaries
    timing = " ".join(f"{k} {v:.2f}s" for k, v in result.timings.items())
    change = [x.holdout_change for x in s if math.isfinite(x.holdout_change)]
    holdout_change = f", holdout change x{change[0]:.2f}" if len(s) == 1 and change else ""
    return (
        f"round {result.round_id}{' (dry run)' if dry_run else ''}: window {result.window.start:%H:%M}-"
        f"{result.window.end:%H:%M} UTC, {len(s)} POPs, scored {sum(x.scored for x in s)}, "
        f"on BBR {sum(x.selected for x in s)} (+{sum(x.new for x in s)} new, "
        f"{sum(x.reverted for x in s)} reverted), trials {sum(x.trials for x in s)} "
        f"(ended: {sum(x.kept_by_trial for x in s)} kept, {sum(x.reverted_by_trial for x in s)} reverted), "
        f"holdout {sum(x.holdout for x in s)}{holdout_change}{_controls_text(s)}"
        f"{_outcome_text(result)}, {result.seconds:.2f}s [{timing}]"
    )


def _controls_text(summaries: list[PopSummary]) -> str:
    """', 50 over cap, 2 pinned' — the operator's controls that acted this round, or ''."""
    over_cap, pinned = sum(x.over_cap for x in summaries), sum(x.pinned for x in summaries)
    return (f", {over_cap} over cap" if over_cap else "") + (f", {pinned} pinned" if pinned else "")


def _outcome_text(result: RoundResult) -> str:
    """', configs: 1 published, 1 rejected (lax: over_cap: ...)' — or '' before publishing."""
    if not result.outcomes:
        return ""
    counts = Tally(o.status for o in result.outcomes.values())
    text = ", configs: " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    failed = [o for _, o in sorted(result.outcomes.items()) if o.status in NOT_PUBLISHED]
    if failed:
        text += f" ({failed[0].pop}: {failed[0].reason[:160]})"
    return text


class Controller:
    """Runs rounds against one store; used by the scheduler and by --once."""

    def __init__(
        self, store: Store, settings: ControlSettings, metrics: Metrics, publisher: Publisher | None = None
    ) -> None:

        self.store = store
        self.settings = settings
        self.cfg = settings.scoring
        self.metrics = metrics
        self.publisher: Publisher | None = publisher  # given: the lab's, on its own clock
        target = settings.rollout.kafka or settings.rollout.publish_dir
        if not settings.dry_run and not target and publisher is None:
            log.warning("no --kafka or --publish-dir: desired states are recorded but not published")
        if not settings.dry_run and target and publisher is None:
            # The publisher's counters go on the controller's registry (one /metrics endpoint).
            self.publisher = Publisher(store, settings.rollout, metrics.registry)
        self.refuse = refusal(ValidationPolicy.from_settings(settings.rollout))  # validation's per-prefix rule, cached
        self.memo = StateMemo()  # the state the last round wrote: the next round's previous state

    def round(self, now: dt.datetime | None = None) -> RoundResult | None:

        try:
            result = run_round(
                self.store,
                self.cfg,
                now or dt.datetime.now(dt.UTC),
                pop=self.settings.pop,
                dry_run=self.settings.dry_run,
                publishing=self.publisher is not None,
                refuse=self.refuse,
                evidence=self.settings.evidence,
                deny=self.settings.rollout.deny,
                memo=self.memo,
            )
        except StoreError as exc:
            self.metrics.rounds.labels("error").inc()
            log.error("round failed: %s", exc)
            return None
        self.metrics.observe(result)
        if self.publisher is not None:  # also with no states: rollouts in flight advance
            try:
                outcomes = self.publisher.publish_round(result.states)
                result.publish_error = self.publisher.failure
                desired = {s.pop: s for s in result.states}
                write_outcomes(self.store, [(desired[pop], o) for pop, o in outcomes.items()])
                result.outcomes = outcomes
            except Exception as exc:  # the next round retries; never kill the loop
                self.metrics.rounds.labels("publish_error").inc()
                log.error("publishing round %s failed: %s", result.round_id, exc)
                result.publish_error = str(exc)
                result.outcomes = self._failed(result, str(exc))
        for outcome in result.outcomes.values():
            self.metrics.outcomes.labels(outcome.status).inc()
        log.info("%s", round_line(result, self.settings.dry_run))
        return result

    def _failed(self, result: RoundResult, why: str) -> dict[str, PublishOutcome]:
        """Every POP of the round not published (recorded as such when the store allows)."""

        outcomes = {s.pop: PublishOutcome(s.pop, PUBLISH_FAILED, reason=why) for s in result.states}
        try:
            write_outcomes(self.store, [(s, outcomes[s.pop]) for s in result.states])
        except StoreError as exc:
            log.error("round %s: outcome not recorded: %s", result.round_id, exc)
        return outcomes
