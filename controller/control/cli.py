"""`dyncc control`: score prefixes every 5 minutes and decide which move to BBR.

    dyncc control --clickhouse URL [--every 5m] [--once] [--pop POP] [--dry-run]
                  [--lookback 3h] [--bucket 5m] [--metrics-port N] ...
    dyncc control --clickhouse URL explain --pop POP --prefix P

Rounds run on an APScheduler interval aligned to `--every` boundaries (plus
`--delay` for late data), one at a time, missed runs coalesced.  Each round
logs one line, updates Prometheus metrics, writes `selections` and hands the
per-POP DesiredState to the controller's Publisher (not with --dry-run); the
outcome per POP is recorded in `round_outcomes`, and the next round starts from
the latest round in force (controller/scoring/state.py).

The flags are the rows of ControlSettings (controller/control/settings.py: the
scoring definitions and the RolloutConfig are parts of it), and each action's
sub-parser the rows of its own settings class.  `run(args)` turns the parsed
command line into those settings objects first (every value checked: ConfigError,
one line, exit 2; then the inventory, key and destination, before the store is
opened); `--once` exits 1 when a POP's config was rejected or could not be
published.  The rollout actions (keygen, rollout, kill-switch) run in
controller/rollout/cli.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dyncc_common.errors import ConfigError
from dyncc_common.runtime import StopFlag, setup_logging, start_metrics

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Gauge

    from controller.control.settings import ControlSettings
    from controller.rollout.publish import Publisher
    from controller.scoring.desired import PublishOutcome
    from controller.scoring.round import RoundResult
    from controller.store import Store

log = logging.getLogger("dyncc.control")

#: options of the main parser repeated after an action name (SUPPRESS: a value given before it stays)
SHARED = ("clickhouse", "kafka", "publish_dir", "private_key", "config_topic", "status_topic")


def configure(parser: argparse.ArgumentParser) -> None:
    """The flags of ControlSettings, and the actions' sub-parsers from their settings tables."""
    from controller.control.settings import ControlSettings, ExplainSettings
    from controller.rollout.settings import KeygenSettings, KillSwitchSettings, RolloutActionSettings

    ControlSettings.add_arguments(parser)
    subparsers = parser.add_subparsers(dest="action", metavar="ACTION")
    explain = subparsers.add_parser("explain", help="why a prefix got its decision")
    ControlSettings.add_arguments(explain, only={"clickhouse", "at"})
    ExplainSettings.add_arguments(explain)
    keygen = subparsers.add_parser("keygen", help="write an Ed25519 key pair for signing configs")
    KeygenSettings.add_arguments(keygen)
    rollout = subparsers.add_parser("rollout", help="staged rollout: status, or advance the gates now")
    RolloutActionSettings.add_arguments(rollout)
    ControlSettings.add_arguments(rollout, only=SHARED)
    kill = subparsers.add_parser("kill-switch", help="publish an empty signed config: agents drop every route")
    KillSwitchSettings.add_arguments(kill)
    ControlSettings.add_arguments(kill, only=SHARED)


class Metrics:
    """The controller's Prometheus metrics on a per-instance registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.rounds = Counter("dyncc_control_rounds", "controller rounds", ["result"], registry=r)
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
        self.outcomes = Counter(
            "dyncc_control_round_outcomes", "per POP and round: what became of the decisions", ["status"], registry=r
        )

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
        f"{sum(x.reverted for x in s)} reverted), holdout {sum(x.holdout for x in s)}{holdout_change}"
        f"{_outcome_text(result)}, {result.seconds:.2f}s [{timing}]"
    )


def _outcome_text(result: RoundResult) -> str:
    """', configs: 1 published, 1 rejected (lax: over_cap: ...)' — or '' before publishing."""
    from collections import Counter

    from controller.scoring.desired import NOT_PUBLISHED

    if not result.outcomes:
        return ""
    counts = Counter(o.status for o in result.outcomes.values())
    text = ", configs: " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    failed = [o for _, o in sorted(result.outcomes.items()) if o.status in NOT_PUBLISHED]
    if failed:
        text += f" ({failed[0].pop}: {failed[0].reason[:160]})"
    return text


class Controller:
    """Runs rounds against one store; used by the scheduler and by --once."""

    def __init__(self, store: Store, settings: ControlSettings, metrics: Metrics) -> None:
        from controller.rollout.validate import refusal

        self.store = store
        self.settings = settings
        self.cfg = settings.scoring
        self.metrics = metrics
        self.publisher: Publisher | None = None
        target = settings.rollout.kafka or settings.rollout.publish_dir
        if not settings.dry_run and not target:
            log.warning("no --kafka or --publish-dir: desired states are recorded but not published")
        if not settings.dry_run and target:
            from controller.rollout.publish import Publisher

            # The publisher's counters go on the controller's registry (one /metrics endpoint).
            self.publisher = Publisher(store, settings.rollout, metrics.registry)
        self.refuse = refusal(settings.rollout.validation_policy())  # validation's per-prefix rule, cached

    def round(self, now: dt.datetime | None = None) -> RoundResult | None:
        from controller.scoring.round import run_round
        from controller.scoring.state import write_outcomes
        from controller.store import StoreError

        try:
            result = run_round(
                self.store,
                self.cfg,
                now or dt.datetime.now(dt.UTC),
                pop=self.settings.pop,
                dry_run=self.settings.dry_run,
                expire_seconds=self.settings.expire_seconds,
                publishing=self.publisher is not None,
                refuse=self.refuse,
            )
        except StoreError as exc:
            self.metrics.rounds.labels("error").inc()
            log.error("round failed: %s", exc)
            return None
        self.metrics.observe(result)
        if self.publisher is not None:  # also with no states: rollouts in flight advance
            try:
                outcomes = self.publisher.publish_round(result.states)
                desired = {s.pop: s for s in result.states}
                write_outcomes(self.store, [(desired[pop], o) for pop, o in outcomes.items()])
                result.outcomes = outcomes
            except Exception as exc:  # the next round retries; never kill the loop
                self.metrics.rounds.labels("publish_error").inc()
                log.error("publishing round %s failed: %s", result.round_id, exc)
                result.outcomes = self._failed(result, str(exc))
        for outcome in result.outcomes.values():
            self.metrics.outcomes.labels(outcome.status).inc()
        log.info("%s", round_line(result, self.settings.dry_run))
        return result

    def _failed(self, result: RoundResult, why: str) -> dict[str, PublishOutcome]:
        """Every POP of the round not published (recorded as such when the store allows)."""
        from controller.scoring.desired import PUBLISH_FAILED, PublishOutcome
        from controller.scoring.state import write_outcomes
        from controller.store import StoreError

        outcomes = {s.pop: PublishOutcome(s.pop, PUBLISH_FAILED, reason=why) for s in result.states}
        try:
            write_outcomes(self.store, [(s, outcomes[s.pop]) for s in result.states])
        except StoreError as exc:
            log.error("round %s: outcome not recorded: %s", result.round_id, exc)
        return outcomes


def next_boundary(now: dt.datetime, every: float, delay: float) -> dt.datetime:
    """The first `every`-aligned instant (plus delay) after now."""
    epoch = now.timestamp()
    start = math.floor((epoch - delay) / every) * every + every + delay
    return dt.datetime.fromtimestamp(start, dt.UTC)


def _print_decisions(result: RoundResult) -> None:
    shown = result.decisions[result.decisions["decision"] != "skip"]
    for row in shown.to_dict("records"):
        print(f"{row['pop']}\t{row['prefix']}\t{row['decision']}\t{row['reason']}")


def run(args: argparse.Namespace) -> int:
    """The command line -> settings objects (ControlSettings, and the action's), then run."""
    from controller.control.settings import ControlSettings

    flags = vars(args)
    action = flags.get("action")
    config = flags.get("config")
    if action == "keygen":
        from controller.rollout import cli as rollout_actions
        from controller.rollout.settings import KeygenSettings

        return rollout_actions.keygen(KeygenSettings.from_sources(flags, config))
    if action in ("rollout", "kill-switch"):
        from controller.rollout import cli as rollout_actions
        from controller.rollout.settings import KillSwitchSettings, RolloutActionSettings

        if action == "rollout":
            rollout = RolloutActionSettings.from_sources(flags, config)
            settings = ControlSettings.from_sources(_without(flags, "pop"), config)
            setup_logging(settings.verbose)
            return rollout_actions.rollout(settings.clickhouse, settings.rollout, rollout)
        kill = KillSwitchSettings.from_sources(flags, config)
        settings = ControlSettings.from_sources(_without(flags, "pop"), config)
        setup_logging(settings.verbose)
        return rollout_actions.kill_switch(settings.clickhouse, settings.rollout, kill)
    settings = ControlSettings.from_sources(flags, config)
    setup_logging(settings.verbose)
    if action == "explain":
        from controller.control.settings import ExplainSettings
        from controller.scoring.explain import check_prefix

        explaining = ExplainSettings.from_sources(flags, config)
        if not settings.clickhouse:
            raise ConfigError("--clickhouse URL is required")
        return _explain(settings, explaining.pop, check_prefix(explaining.prefix))
    if not settings.clickhouse:
        raise ConfigError("--clickhouse URL is required")
    check_options(settings)
    return _with_store(settings, lambda store: _control(store, settings))


def _without(flags: dict[str, object], *keys: str) -> dict[str, object]:
    return {k: v for k, v in flags.items() if k not in keys}


def _with_store(settings: ControlSettings, body: Callable[[Store], int]) -> int:
    from controller.store import open_store

    store = open_store(str(settings.clickhouse))
    try:
        for table in ("selections", "scoring_buckets", "tcpinfo_5m"):
            if not store.table_exists(table):
                raise ConfigError(f"table {table} missing in {store.url.redacted()}: run 'dyncc schema apply' first")
        if settings.pop:  # a POP with no telemetry and no published config is a typo, not "nothing to do"
            from controller.store.pops import require_known_pops

            require_known_pops(store, [settings.pop])
        return body(store)
    finally:
        store.close()


def _explain(settings: ControlSettings, pop: str, prefix: str) -> int:
    from controller.rollout.validate import refusal
    from controller.scoring.explain import explain

    refuse = refusal(settings.rollout.validation_policy())
    when = settings.round_time()
    ran = dataclasses.replace(settings, pop=pop)

    def body(store: Store) -> int:
        print(explain(store, settings.scoring, pop, prefix, when, refuse))
        return 0

    return _with_store(ran, body)


def _control(store: Store, settings: ControlSettings) -> int:
    metrics = Metrics()
    controller = Controller(store, settings, metrics)
    if settings.once:
        from controller.scoring.desired import NOT_PUBLISHED

        result = controller.round(settings.round_time())
        if result is None:
            return 1
        if settings.dry_run:
            _print_decisions(result)
        failed = sorted(pop for pop, o in result.outcomes.items() if o.status in NOT_PUBLISHED)
        if failed:
            log.error("round %s: not published for %s", result.round_id, ", ".join(failed))
            return 1
        return 0
    start_metrics(settings.metrics_port, metrics.registry)
    return schedule(controller, float(settings.every or 0), float(settings.delay or 0))


def check_options(settings: ControlSettings) -> None:
    """What a round needs beyond the settings' own checks, before the store is opened
    (ConfigError, one line): the inventory file and — when publishing — the key, the
    destination and the topics."""
    rollout = settings.rollout
    rollout.rollout_settings()
    if not settings.dry_run and (rollout.kafka or rollout.publish_dir):
        from controller.rollout.cli import check_publish_options

        check_publish_options(rollout)


def schedule(controller: Controller, every: float, delay: float, stop: StopFlag | None = None) -> int:
    """Run rounds on aligned boundaries until SIGTERM/SIGINT (or `stop` is set)."""
    from apscheduler.schedulers.background import BackgroundScheduler
    from apscheduler.triggers.interval import IntervalTrigger

    stop = stop or StopFlag()
    first = next_boundary(dt.datetime.now(dt.UTC), every, delay)
    scheduler = BackgroundScheduler(timezone=dt.UTC)
    scheduler.add_job(
        controller.round,
        IntervalTrigger(seconds=every, start_date=first, timezone=dt.UTC),
        id="control-round",
        max_instances=1,
        coalesce=True,
        misfire_grace_time=max(1, int(every)),
    )
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    log.info("controller: rounds every %gs, first at %s", every, first.strftime("%H:%M:%S UTC"))
    scheduler.start()
    with stop.installed():
        while not stop.wait(0.5):
            pass
    log.info("stopping (%s): waiting for a running round", stop.signal_name or "stop")
    started = time.monotonic()
    scheduler.shutdown(wait=True)
    log.info("stopped after %.1fs", time.monotonic() - started)
    return 0
