"""`dyncc control`: score prefixes every 5 minutes and decide which move to BBR.

    dyncc control --clickhouse URL [--every 5m] [--once] [--pop POP] [--dry-run]
                  [--lookback 3h] [--bucket 5m] [--metrics-port N] ...
    dyncc control --clickhouse URL explain --pop POP --prefix P [--at TIME] [scoring options]
    dyncc control --clickhouse URL pin PREFIX --pop POP --algorithm bbr|cubic --by WHO --why TEXT
    dyncc control --clickhouse URL unpin PREFIX --pop POP --by WHO [--why TEXT]
    dyncc control --clickhouse URL pins [--pop POP]

Rounds run on an APScheduler interval aligned to `--every` boundaries (plus
`--delay` for late data), one at a time, missed runs coalesced.  Each round
logs one line, updates Prometheus metrics, writes `selections` and hands the
per-POP DesiredState to the controller's Publisher (not with --dry-run); the
outcome per POP is recorded in `round_outcomes`, and the next round starts from
the latest round in force (controller/scoring/state.py).

The flags are the rows of ControlSettings (controller/control/settings.py: the
scoring definitions and the RolloutSettings are parts of it), and each action's
sub-parser the rows of its own settings class.  `run(args)` turns the parsed
command line into those settings objects first (every value checked: ConfigError,
one line, exit 2; then the inventory, key and destination, before the store is
opened); `--once` exits 1 when the round failed or something could not be published
(a POP's config rejected or not sent, or the publisher unable to run at all), 0 otherwise
(published, unchanged, held, killed, or recorded only: --dry-run or no --kafka /
--publish-dir).  `explain` uses the settings the latest round that decided the prefix
recorded, unless scoring, decision or trial options are given (on the command line or in
--config); it reads the store only, so a chdb:// directory that does not exist is refused
instead of created.  The rollout actions (keygen, rollout, kill-switch) run in
controller/rollout/cli.py; pin, unpin and pins (the operator's pins, held by every round) in
controller/control/pins.py.
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

from controller.control.loop import Controller, Metrics
from controller.store.decisions import SKIP
from dyncc_common.errors import ConfigError
from dyncc_common.kafka_security import KAFKA_SECURITY_KEYS
from dyncc_common.runtime import StopFlag, setup_logging, start_metrics

if TYPE_CHECKING:
    from controller.control.settings import ControlSettings
    from controller.scoring.round import RoundResult
    from controller.store import Store

log = logging.getLogger("dyncc.control")

#: options of the main parser repeated after an action name (SUPPRESS: a value given before it stays)
SHARED = ("clickhouse", "kafka", "publish_dir", "private_key", "config_topic", "status_topic", *KAFKA_SECURITY_KEYS)
#: the tables a round reads and writes (older stores: 'dyncc schema apply' adds what is missing)
ROUND_TABLES = (
    "selections",
    "scoring_cache",
    "tcpinfo_5m",
    "tcpinfo_5m_nal",
    "trial_rounds",
    "round_settings",
    "round_outcomes",
    "round_controls",
    "pins",
)
#: the validation options a bbr pin is checked against (repeated after `pin`)
PIN_VALIDATION = ("deny", "v4_length", "v6_length", "allowed_algorithms")
#: what the pin actions read and write
PIN_TABLES = ("pins", "tcpinfo_5m", "config_versions")
#: what explain reads (round_settings is optional: without it, the command line's settings)
EXPLAIN_TABLES = ("selections", "scoring_cache", "tcpinfo_5m", "tcpinfo_5m_nal", "trial_rounds", "round_outcomes")


def configure(parser: argparse.ArgumentParser) -> None:
    """The flags of ControlSettings, and the actions' sub-parsers from their settings tables."""
    from controller.control.settings import ControlSettings, ExplainSettings, PinSettings, PinsSettings, UnpinSettings
    from controller.rollout.settings import KeygenSettings, KillSwitchSettings, RolloutActionSettings

    ControlSettings.add_arguments(parser)
    subparsers = parser.add_subparsers(dest="action", metavar="ACTION")
    explain = subparsers.add_parser(
        "explain",
        help="why a prefix got its decision (with the settings its round recorded, unless scoring options are given)",
        description="Why a prefix got its decision: its buckets, scores, the decision a round would make now "
        "(a dry run) and its trials, with the settings the latest round that decided it recorded.  Any "
        "scoring, decision or trial option below (or in --config) explains it with the command line's "
        "settings instead (their defaults where not given).  The output's second line says which.",
    )
    ControlSettings.add_arguments(explain, only={"clickhouse", "at", *scoring_option_keys()})
    ExplainSettings.add_arguments(explain)
    keygen = subparsers.add_parser("keygen", help="write an Ed25519 key pair for signing configs")
    KeygenSettings.add_arguments(keygen)
    rollout = subparsers.add_parser("rollout", help="staged rollout: status, or advance the gates now")
    RolloutActionSettings.add_arguments(rollout)
    ControlSettings.add_arguments(rollout, only=SHARED)
    kill = subparsers.add_parser("kill-switch", help="publish an empty signed config: agents drop every route")
    KillSwitchSettings.add_arguments(kill)
    ControlSettings.add_arguments(kill, only=SHARED)
    pin = subparsers.add_parser(
        "pin",
        help="pin a prefix at a POP to bbr or cubic: every round holds it (recorded: who, why, when)",
        description="Pin a prefix at a POP: every round keeps it on the pinned algorithm whatever its scores, "
        "trials and caps say; a bbr pin goes out in the POP's signed config with the next round, a cubic pin "
        "keeps the prefix out of it.  A bbr pin must pass config validation's per-prefix rule (--deny ...).",
    )
    PinSettings.add_arguments(pin)
    ControlSettings.add_arguments(pin, only={"clickhouse", *PIN_VALIDATION})
    unpin = subparsers.add_parser("unpin", help="remove a pin: the rounds decide the prefix again")
    UnpinSettings.add_arguments(unpin)
    ControlSettings.add_arguments(unpin, only={"clickhouse"})
    pins = subparsers.add_parser("pins", help="list the pins in force: who pinned, when and why")
    PinsSettings.add_arguments(pins)
    ControlSettings.add_arguments(pins, only={"clickhouse"})


def next_boundary(now: dt.datetime, every: float, delay: float) -> dt.datetime:
    """The first `every`-aligned instant (plus delay) after now."""
    epoch = now.timestamp()
    start = math.floor((epoch - delay) / every) * every + every + delay
    return dt.datetime.fromtimestamp(start, dt.UTC)


def _print_decisions(result: RoundResult) -> None:
    shown = result.decisions[result.decisions["decision"] != SKIP]
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
    if action in ("pin", "unpin", "pins"):
        return _pins(action, flags, config)
    settings = ControlSettings.from_sources(flags, config)
    setup_logging(settings.verbose)
    if action == "explain":
        from controller.control.settings import ExplainSettings
        from controller.scoring.explain import check_prefix

        explaining = ExplainSettings.from_sources(flags)  # --pop and --prefix: command line only
        if not settings.clickhouse:
            raise ConfigError("--clickhouse URL is required")
        explicit = scoring_options_given(flags, config)
        return _explain(settings, explaining.pop, check_prefix(explaining.prefix), explicit)
    if not settings.clickhouse:
        raise ConfigError("--clickhouse URL is required")
    check_options(settings)
    return _with_store(settings, lambda store: _control(store, settings))


def _pins(action: str, flags: dict[str, object], config: str | None) -> int:
    """pin / unpin / pins (controller/control/pins.py): the store only, nothing is published."""
    from controller.control import pins
    from controller.control.settings import ControlSettings, PinSettings, PinsSettings, UnpinSettings
    from controller.rollout.validate import ValidationPolicy

    settings = ControlSettings.from_sources(_without(flags, "pop"), config)
    setup_logging(settings.verbose)
    if not settings.clickhouse:
        raise ConfigError("--clickhouse URL is required")
    if action == "pin":
        chosen = PinSettings.from_sources(flags)
        policy = ValidationPolicy.from_settings(settings.rollout)
        problem = pins.pin_problem(chosen.prefix, chosen.pin_algorithm, policy)  # before the store is opened
        if problem:
            raise ConfigError(problem)
        return _with_store(settings, lambda store: pins.pin(store, chosen, policy), PIN_TABLES, existing=True)
    if action == "unpin":
        gone = UnpinSettings.from_sources(flags)
        return _with_store(settings, lambda store: pins.unpin(store, gone), PIN_TABLES, existing=True)
    listed = PinsSettings.from_sources(flags)
    return _with_store(settings, lambda store: pins.list_pins(store, listed), PIN_TABLES, existing=True)


def _without(flags: dict[str, object], *keys: str) -> dict[str, object]:
    return {k: v for k, v in flags.items() if k not in keys}


def scoring_option_keys() -> set[str]:
    """The dests of the scoring, decision and trial options (ScoringSettings, --expire among them,
    and EvidenceSettings): what a round recorded and explain otherwise takes from the round."""
    from controller.evidence.settings import EvidenceSettings
    from controller.scoring.settings import ScoringSettings

    return {*ScoringSettings.defaults(), *EvidenceSettings.defaults()}


def scoring_options_given(flags: dict[str, object], config: str | None) -> bool:
    """Did the user give a scoring, decision or trial option (scoring_option_keys(); before or after
    `explain`): a flag, or a --config file that changes one from its default?"""
    from controller.control.settings import ControlSettings

    if any(flags.get(key) is not None for key in scoring_option_keys()):
        return True
    if not config:
        return False
    from_file = ControlSettings.from_sources({}, config)
    default = ControlSettings()
    return (from_file.scoring, from_file.evidence) != (default.scoring, default.evidence)


def _with_store(
    settings: ControlSettings,
    body: Callable[[Store], int],
    tables: tuple[str, ...] = ROUND_TABLES,
    existing: bool = False,
) -> int:
    """Open the store (existing: it must exist, a reader never creates a chDB directory), check
    its tables and --pop, run `body`."""
    from controller.store import open_store

    store = open_store(str(settings.clickhouse), existing=existing)
    try:
        for table in tables:
            if not store.table_exists(table):
                raise ConfigError(f"table {table} missing in {store.url.redacted()}: run 'dyncc schema apply' first")
        if settings.pop:  # a POP with no telemetry and no published config is a typo, not "nothing to do"
            from controller.store.pops import require_known_pops

            require_known_pops(store, [settings.pop])
        return body(store)
    finally:
        store.close()


def _explain(settings: ControlSettings, pop: str, prefix: str, explicit: bool) -> int:
    """explain: with the recorded settings of the round that decided the prefix unless `explicit`."""
    from controller.rollout.validate import ValidationPolicy, refusal
    from controller.scoring.explain import ExplainWith, choose_settings, explain

    refuse = refusal(ValidationPolicy.from_settings(settings.rollout))
    when = settings.round_time()
    ran = dataclasses.replace(settings, pop=pop)
    command_line = ExplainWith(settings.scoring, settings.evidence)

    def body(store: Store) -> int:
        used = choose_settings(store, pop, prefix, when, command_line, explicit)
        print(
            explain(
                store,
                used.scoring,
                pop,
                prefix,
                when,
                refuse,
                used.evidence,
                settings_from=used.source,
            )
        )
        return 0

    return _with_store(ran, body, EXPLAIN_TABLES, existing=True)


def _control(store: Store, settings: ControlSettings) -> int:
    from controller.control.loop import Controller

    metrics = Metrics()
    controller = Controller(store, settings, metrics)
    if settings.once:
        from controller.store.outcomes import NOT_PUBLISHED

        result = controller.round(settings.round_time())
        if result is None:
            return 1
        if settings.dry_run:
            _print_decisions(result)
        failed = sorted(pop for pop, o in result.outcomes.items() if o.status in NOT_PUBLISHED)
        if failed:
            log.error("round %s: not published for %s", result.round_id, ", ".join(failed))
            return 1
        if result.publish_error:  # also with no POP to publish: rollouts in flight could not move
            log.error("round %s: nothing could be published: %s", result.round_id, result.publish_error)
            return 1
        return 0
    start_metrics(settings.metrics_port, metrics.registry, settings.metrics_address)
    return schedule(controller, float(settings.every or 0), float(settings.delay or 0))


def check_options(settings: ControlSettings) -> None:
    """What a round needs beyond the settings' own checks, before the store is opened
    (ConfigError, one line): the inventory file and — when publishing — the key, the
    destination and the topics."""
    rollout = settings.rollout
    rollout.host_lists()  # reads --inventory
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
