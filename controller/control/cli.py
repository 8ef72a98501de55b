"""`dyncc control`: score prefixes every 5 minutes and decide which move to BBR.

    dyncc control --clickhouse URL [--every 5m] [--once] [--pop POP] [--dry-run]
                  [--lookback 3h] [--bucket 5m] [--metrics-port N] ...
    dyncc control --clickhouse URL explain --pop POP --prefix P

Rounds run on an APScheduler interval aligned to `--every` boundaries (plus
`--delay` for late data), one at a time, missed runs coalesced.  Each round
logs one line, updates Prometheus metrics, writes `selections` and hands the
per-POP DesiredState to the publisher (not with --dry-run), whose outcome per
POP is recorded in `round_outcomes`; the next round starts from the latest
round in force (controller/scoring/state.py).  Every option is checked before
the store is opened (`check_options`, ConfigError: one line, exit 2);
`--once` exits 1 when a POP's config was rejected or could not be published.
The rollout actions (keygen, rollout, kill-switch) come from
controller/rollout/cli.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import math
import time
from types import ModuleType
from typing import TYPE_CHECKING, Any

from dyncc_common.errors import ConfigError
from dyncc_common.runtime import StopFlag, setup_logging, start_metrics
from dyncc_common.units import parse_duration

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Gauge

    from controller.rollout.validate import ValidationPolicy
    from controller.scoring.desired import PublishOutcome
    from controller.scoring.round import RoundResult
    from controller.scoring.settings import ScoringConfig
    from controller.store import Store

log = logging.getLogger("dyncc.control")


def _add_common(parser: argparse.ArgumentParser, suppress: bool) -> None:
    default: Any = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "--clickhouse",
        metavar="URL",
        default=default,
        help="store URL: clickhouse://user:pass@host:port/db or chdb:///path/dir",
    )
    parser.add_argument(
        "--at",
        metavar="TIME",
        default=default,
        help="score as of this UTC time (ISO 8601) instead of now (--once / explain)",
    )


def configure(parser: argparse.ArgumentParser) -> None:
    _add_common(parser, suppress=False)
    parser.add_argument("--every", default=None, help="round interval (default: the bucket, 5m)")
    parser.add_argument("--delay", default=None, help="start rounds this long after a boundary (default 30s)")
    parser.add_argument(
        "--once",
        action="store_true",
        help="run one round now and exit (1 when a POP's config was rejected or not published)",
    )
    parser.add_argument("--pop", default="", help="only this POP (default: every POP)")
    parser.add_argument("--dry-run", action="store_true", help="decide and print; write and publish nothing")
    parser.add_argument("--metrics-port", type=int, default=0, help="Prometheus port (0 = off)")
    parser.add_argument("-v", "--verbose", action="store_true")
    g = parser.add_argument_group("scoring definitions")
    g.add_argument("--bucket", default="5m", help="bucket length; not 5m reads raw tcpinfo (lab clock)")
    g.add_argument("--lookback", default="3h", help="scoring window (default 3h = 36 buckets)")
    g.add_argument(
        "--min-bytes",
        type=int,
        default=102_400,
        help="a flow qualifies when bytes_acked > this (not 102400 reads raw tcpinfo)",
    )
    g.add_argument(
        "--min-bucket-samples",
        type=int,
        default=5,
        help="qualifying samples for a prefix to count in a bucket (scoring's min_samples)",
    )
    g.add_argument("--threshold-quantile", type=float, default=0.2, help="per-bucket bad threshold quantile")
    g.add_argument("--min-buckets", type=int, default=12, help="counted buckets needed to be scored")
    g.add_argument("--min-duty", type=float, default=0.6)
    g.add_argument("--max-flap", type=float, default=0.3)
    g.add_argument("--min-rtt", default="10ms", help="median min_rtt below this: low-RTT, stays on CUBIC")
    g = parser.add_argument_group("decisions")
    g.add_argument("--holdout", type=float, default=0.10, help="fraction of candidates kept as control group")
    g.add_argument("--min-hold", default="24h", help="minimum time on BBR before a revert")
    g.add_argument("--cooldown", default="24h", help="block re-selection this long after a revert")
    g.add_argument("--revert-margin", type=float, default=0.05, help="effect must be worse by more than this")
    g.add_argument("--expire", default="7d", help="release prefixes not seen for this long")
    g.add_argument("--max-bbr-per-pop", type=int, default=1000, help="cap of prefixes on BBR per POP")
    g.add_argument("--max-new", type=int, default=100, help="max new selections per POP and round")
    g.add_argument("--algorithm", default="bbr")

    subparsers = parser.add_subparsers(dest="action", metavar="ACTION")
    explain = subparsers.add_parser("explain", help="why a prefix got its decision")
    _add_common(explain, suppress=True)
    explain.add_argument("--pop", required=True, default=argparse.SUPPRESS)
    explain.add_argument("--prefix", required=True)
    from controller.rollout import cli as rollout_actions
    from controller.rollout import publish as publisher

    rollout_actions.register(subparsers)
    publisher.add_publish_options(parser)


def scoring_config(args: argparse.Namespace) -> ScoringConfig:
    """The ScoringConfig from the command line; ConfigError with one line when inconsistent."""
    from controller.scoring.settings import ScoringConfig, ScoringConfigError

    bucket = parse_duration(args.bucket, "bucket")
    lookback = parse_duration(args.lookback, "lookback")
    if bucket != int(bucket) or lookback != int(lookback):
        raise ConfigError("--bucket and --lookback must be whole seconds")
    try:
        return ScoringConfig(
            bucket_seconds=int(bucket),
            lookback_seconds=int(lookback),
            min_bytes=args.min_bytes,
            min_samples=args.min_bucket_samples,
            threshold_quantile=args.threshold_quantile,
            min_buckets=args.min_buckets,
            min_duty=args.min_duty,
            max_flap=args.max_flap,
            min_rtt_ms=parse_duration(args.min_rtt, "min-rtt") * 1000,
            holdout_fraction=args.holdout,
            min_hold_seconds=int(parse_duration(args.min_hold, "min-hold")),
            cooldown_seconds=int(parse_duration(args.cooldown, "cooldown")),
            revert_margin=args.revert_margin,
            max_per_pop=args.max_bbr_per_pop,
            max_new_per_round=args.max_new,
            algorithm=args.algorithm,
        ).validate()
    except ScoringConfigError as exc:
        raise ConfigError(str(exc)) from exc


def _round_time(args: argparse.Namespace) -> dt.datetime:
    text = getattr(args, "at", None)
    if not text:
        return dt.datetime.now(dt.UTC)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(f"bad --at {text!r}: use ISO 8601, e.g. 2024-03-01T12:00:30Z") from exc
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


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

    def __init__(self, store: Store, cfg: ScoringConfig, args: argparse.Namespace, metrics: Metrics) -> None:
        self.store = store
        self.cfg = cfg
        self.args = args
        self.metrics = metrics
        from controller.rollout import publish as publisher

        self.publisher: ModuleType | None = None if args.dry_run else publisher
        target = getattr(args, "kafka", None) or getattr(args, "publish_dir", None)
        if self.publisher is not None and not target:
            log.warning("no --kafka or --publish-dir: desired states are recorded but not published")
            self.publisher = None
        # The publisher's counters go on the controller's registry (one /metrics endpoint).
        args.metrics_registry = metrics.registry
        self.expire_seconds = int(parse_duration(args.expire, "expire"))
        from controller.scoring.round import refusal

        self.refuse = refusal(publisher.validation_policy(args))  # validation's per-prefix rule, cached

    def round(self, now: dt.datetime | None = None) -> RoundResult | None:
        from controller.scoring.round import run_round
        from controller.store import StoreError

        try:
            result = run_round(
                self.store,
                self.cfg,
                now or dt.datetime.now(dt.UTC),
                pop=self.args.pop,
                dry_run=self.args.dry_run,
                expire_seconds=self.expire_seconds,
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
                result.outcomes = self.publisher.publish_round(self.store, result.states, self.args)
            except Exception as exc:  # the next round retries; never kill the loop
                self.metrics.rounds.labels("publish_error").inc()
                log.error("publishing round %s failed: %s", result.round_id, exc)
                result.outcomes = self._failed(result, str(exc))
        for outcome in result.outcomes.values():
            self.metrics.outcomes.labels(outcome.status).inc()
        log.info("%s", round_line(result, self.args.dry_run))
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


def _check_pop_and_prefix(args: argparse.Namespace) -> None:
    """--pop, explain's --prefix and --at, checked before the store is opened (ConfigError)."""
    from dyncc_common.names import check_pop

    explaining = getattr(args, "action", None) == "explain"
    if args.pop or explaining:
        check_pop(args.pop)
    if explaining:
        from controller.scoring.explain import check_prefix

        args.prefix = check_prefix(args.prefix)
    _round_time(args)


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "action", None)
    if action not in (None, "explain"):
        from controller.rollout import cli as rollout_actions

        code = rollout_actions.run(args)
        if code is not None:
            return int(code)
        raise ConfigError(f"unknown action {action!r}")
    setup_logging(getattr(args, "verbose", False))
    if not args.clickhouse:
        raise ConfigError("--clickhouse URL is required")
    cfg = scoring_config(args)
    _check_pop_and_prefix(args)
    if action is None:
        check_options(args, cfg)
    from controller.store import open_store

    store = open_store(args.clickhouse)
    try:
        for table in ("selections", "scoring_buckets", "tcpinfo_5m"):
            if not int(store.query_rows(f"EXISTS TABLE {table}")[0][0]):
                raise ConfigError(f"table {table} missing in {store.url.redacted()}: run 'dyncc schema apply' first")
        if args.pop:  # a POP with no telemetry and no published config is a typo, not "nothing to do"
            from controller.store.pops import require_known_pops

            require_known_pops(store, [args.pop])
        if action == "explain":
            from controller.scoring.explain import explain

            print(explain(store, cfg, args.pop, args.prefix, _round_time(args)))
            return 0
        return _control(store, cfg, args)
    finally:
        store.close()


def _control(store: Store, cfg: ScoringConfig, args: argparse.Namespace) -> int:
    metrics = Metrics()
    controller = Controller(store, cfg, args, metrics)
    if args.once:
        from controller.scoring.desired import NOT_PUBLISHED

        result = controller.round(_round_time(args))
        if result is None:
            return 1
        if args.dry_run:
            _print_decisions(result)
        failed = sorted(pop for pop, o in result.outcomes.items() if o.status in NOT_PUBLISHED)
        if failed:
            log.error("round %s: not published for %s", result.round_id, ", ".join(failed))
            return 1
        return 0
    every, delay = _every_delay(args, cfg)
    start_metrics(args.metrics_port, metrics.registry)
    return schedule(controller, every, delay)


def _every_delay(args: argparse.Namespace, cfg: ScoringConfig) -> tuple[float, float]:
    every = parse_duration(args.every, "every") if args.every else float(cfg.bucket_seconds)
    delay = parse_duration(args.delay, "delay") if args.delay else min(30.0, cfg.bucket_seconds / 10)
    if every <= 0 or delay >= every:
        raise ConfigError("--every must be positive and longer than --delay")
    return every, delay


def check_options(args: argparse.Namespace, cfg: ScoringConfig) -> ValidationPolicy:
    """Every option of a scoring round, checked before the store is opened (ConfigError, one line):
    validation and rollout settings, caps that validation would always refuse, the schedule,
    and — when publishing — the key, the destination and the topics."""
    from controller.rollout import publish as publisher

    policy = publisher.validation_policy(args)
    publisher.rollout_settings(args)
    conflicts = publisher.cap_conflicts(policy, cfg)
    if conflicts:
        raise ConfigError("; ".join(conflicts))
    parse_duration(args.expire, "expire")
    _every_delay(args, cfg)
    if not 0 <= args.metrics_port <= 65535:
        raise ConfigError(f"--metrics-port {args.metrics_port} must be 0..65535")
    if not args.dry_run and (getattr(args, "kafka", None) or getattr(args, "publish_dir", None)):
        from controller.rollout.cli import check_publish_options

        check_publish_options(args)
    return policy


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
