"""`dyncc control` publishing: options, and one publish round for the scoring loop.

    add_publish_options(parser)            the publishing / validation / rollout options
    validation_policy(args), rollout_settings(args)
                                           the options parsed and checked (ConfigError, one line)
    cap_conflicts(policy, scoring)         scoring caps that validation would always refuse
    publish_round(store, states, args)     per POP: generate, validate, sign, publish, record,
                                           advance the staged rollout; ingest apply statuses first;
                                           returns (and records in round_outcomes) each POP's
                                           PublishOutcome

Configs go to Kafka (`--kafka`, compacted `--config-topic`, key "<pop>" for
POP-wide configs and "<pop>/canary" for canary waves) or to files
(`--publish-dir`, DIR/<pop>.cfg and DIR/<pop>.canary.cfg).  With `--kafka`
the controller also reads ApplyStatus reports from `--status-topic` into
`apply_status`.  Staged rollout (canary first) needs those reports: it is on
with `--kafka` and off with `--publish-dir` alone (then every config goes to
the whole POP at once); `--staging on|off` overrides.

`args` may be a bare argparse.Namespace holding only some attributes (the lab
builds one): every missing option takes its documented default.  Sinks,
signer and status reader are cached per process (keyed by their options).
"""

from __future__ import annotations

import argparse
import logging
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.rollout.engine import RolloutEngine, RolloutSettings, StepCounters
from controller.rollout.signing import Signer
from controller.rollout.sinks import ConfigSink, DirConfigSink, KafkaConfigSink, PublishError
from controller.rollout.state import CANARY, IDLE, REST, GateThresholds, RolloutState
from controller.rollout.state import KILLED as PHASE_KILLED
from controller.rollout.statuses import StatusIngestor
from controller.rollout.validate import ValidationPolicy, parse_deny
from controller.scoring.desired import (
    HELD,
    KILLED,
    PUBLISH_FAILED,
    PUBLISHED,
    REJECTED,
    UNCHANGED,
    DesiredState,
    PublishOutcome,
)
from controller.scoring.settings import ScoringConfig
from controller.store import Store, StoreError
from dyncc_common.errors import ConfigError
from dyncc_common.units import parse_duration, parse_size

log = logging.getLogger("dyncc.publish")

DEFAULTS: dict[str, Any] = {
    "kafka": None,
    "publish_dir": None,
    "private_key": None,
    "config_topic": "dyncc-configs",
    "status_topic": "dyncc-apply-status",
    "status_group": "dyncc-controller",
    "deny": [],
    "v4_length": 24,
    "v6_length": 56,
    "max_per_pop": 5000,
    "max_change_fraction": 0.5,
    "change_floor": 200,
    "allowed_algorithms": "bbr,cubic",
    "lock_cc": False,
    "staging": "auto",
    "canary_hosts": [],
    "canary_fraction": 0.1,
    "hosts": [],
    "inventory": None,
    "soak": "10m",
    "wave_timeout": "15m",
    "baseline": "15m",
    "min_mem_available": "128M",
    "max_load": 64.0,
    "max_p10_regression": 0.15,
    "min_samples": 50,
    "host_expiry": "1h",
    "holddown": "1h",
    "metrics_registry": None,
}


def opt(args: argparse.Namespace, name: str) -> Any:
    value = getattr(args, name, None)
    return DEFAULTS[name] if value is None or value == "" else value


def add_publish_options(parser: argparse.ArgumentParser) -> None:
    """Publishing, validation and rollout options of `dyncc control` (defaults in DEFAULTS)."""
    g = parser.add_argument_group("publishing")
    g.add_argument("--kafka", metavar="BROKERS", help="publish configs to / read statuses from this Kafka")
    g.add_argument(
        "--publish-dir",
        type=Path,
        metavar="DIR",
        help="write signed configs as DIR/<pop>.cfg (and <pop>.canary.cfg) instead of Kafka",
    )
    g.add_argument(
        "--key",
        dest="private_key",
        type=Path,
        metavar="PRIVATE_PEM",
        help="Ed25519 private key that signs configs ('dyncc control keygen')",
    )
    g.add_argument("--config-topic", default=DEFAULTS["config_topic"], help="compacted config topic (key = POP)")
    g.add_argument("--status-topic", default=DEFAULTS["status_topic"], help="ApplyStatus topic (key = host)")
    g.add_argument("--status-group", default=DEFAULTS["status_group"], help="consumer group for statuses")

    v = parser.add_argument_group("validation (a rejected config is recorded and never published)")
    v.add_argument(
        "--deny",
        action="append",
        metavar="CIDR",
        default=[],
        help="never route inside/over this range (infrastructure, anycast, back office); repeatable",
    )
    v.add_argument("--v4-length", type=int, default=DEFAULTS["v4_length"], help="IPv4 prefix length (24)")
    v.add_argument("--v6-length", type=int, default=DEFAULTS["v6_length"], help="IPv6 prefix length (56)")
    v.add_argument("--max-per-pop", type=int, default=DEFAULTS["max_per_pop"], help="prefix cap per POP (5000)")
    v.add_argument(
        "--max-change-fraction",
        type=float,
        default=DEFAULTS["max_change_fraction"],
        help="max changes per round as a fraction of max(previous count, --change-floor) (0.5)",
    )
    v.add_argument(
        "--change-floor",
        type=int,
        default=DEFAULTS["change_floor"],
        help="previous-count floor for the change limit (200: 100 changes from empty)",
    )
    v.add_argument(
        "--allowed-algorithms",
        default=DEFAULTS["allowed_algorithms"],
        help="comma-separated congestion controls a config may name (bbr,cubic)",
    )
    v.add_argument("--lock-cc", action="store_true", help="install RTAX_CC_ALGO locked")

    r = parser.add_argument_group("staged rollout")
    r.add_argument(
        "--staging",
        choices=["auto", "on", "off"],
        default="auto",
        help="canary first (auto: on with --kafka status reports, off with --publish-dir only)",
    )
    r.add_argument(
        "--canary-hosts",
        action="append",
        default=[],
        metavar="POP:HOST,...",
        help="preferred canary hosts, used when known (from reports or --hosts); else a "
        "stable hash-chosen --canary-fraction of the known hosts",
    )
    r.add_argument(
        "--canary-fraction",
        type=float,
        default=DEFAULTS["canary_fraction"],
        help="fraction of a POP's hosts in the canary wave (0.1, at least one host)",
    )
    r.add_argument(
        "--hosts",
        action="append",
        default=[],
        metavar="POP:HOST,...",
        help="host inventory (hosts are also learnt from their status reports)",
    )
    r.add_argument(
        "--inventory",
        type=Path,
        metavar="TOML",
        help='inventory file: [pops.<pop>] hosts = ["h1", ...], canary = ["h1"]',
    )
    r.add_argument("--soak", default=DEFAULTS["soak"], help="canary soak time after the last apply (10m)")
    r.add_argument(
        "--wave-timeout",
        default=DEFAULTS["wave_timeout"],
        help="time for a wave's hosts to report (15m; canary: else rolled back)",
    )
    r.add_argument(
        "--baseline", default=DEFAULTS["baseline"], help="delivery-rate baseline window before the canary (15m)"
    )
    r.add_argument(
        "--min-mem-available",
        default=DEFAULTS["min_mem_available"],
        help="health gate: available memory per host (128M)",
    )
    r.add_argument("--max-load", type=float, default=DEFAULTS["max_load"], help="health gate: load1 (64)")
    r.add_argument(
        "--max-p10-regression",
        type=float,
        default=DEFAULTS["max_p10_regression"],
        help="allowed fall of the canary's p10 delivery rate (0.15 = 15%%)",
    )
    r.add_argument(
        "--min-samples",
        type=int,
        default=DEFAULTS["min_samples"],
        help="qualifying flow samples per window to judge the p10 (50)",
    )
    r.add_argument(
        "--host-expiry",
        default=DEFAULTS["host_expiry"],
        help="a host that has not reported for this long is forgotten (1h)",
    )
    r.add_argument(
        "--holddown",
        default=DEFAULTS["holddown"],
        help="do not retry a rolled-back desired state for this long unless it changes (1h)",
    )


def parse_host_lists(values: Sequence[str], what: str) -> dict[str, list[str]]:
    """['lax:h1,h2', 'lax:h3,fra:h9'] -> {'lax': ['h1','h2','h3'], 'fra': ['h9']} (POP carries over)."""
    out: dict[str, list[str]] = {}
    for value in values:
        pop = ""
        for item in value.split(","):
            item = item.strip()
            if not item:
                continue
            if ":" in item:
                pop, item = item.split(":", 1)
            if not pop or not item:
                raise ConfigError(f"bad {what} entry {value!r}: use POP:HOST[,HOST...]")
            out.setdefault(pop, []).append(item)
    return out


def load_inventory(path: Path) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(hosts per POP, canary hosts per POP) from a TOML inventory."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read inventory {path}: {exc}") from exc
    hosts: dict[str, list[str]] = {}
    canary: dict[str, list[str]] = {}
    pops = data.get("pops", {})
    if not isinstance(pops, dict):
        raise ConfigError(f"inventory {path}: [pops.<pop>] tables expected")
    for pop, table in pops.items():
        if not isinstance(table, dict):
            raise ConfigError(f"inventory {path}: pops.{pop} must be a table")
        for key, target in (("hosts", hosts), ("canary", canary)):
            names = table.get(key, [])
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ConfigError(f"inventory {path}: pops.{pop}.{key} must be a list of host names")
            target[pop] = list(names)
    return hosts, canary


def _merge(a: dict[str, list[str]], b: dict[str, list[str]]) -> dict[str, list[str]]:
    out = {k: list(v) for k, v in a.items()}
    for pop, names in b.items():
        out.setdefault(pop, []).extend(n for n in names if n not in out[pop])
    return out


def validation_policy(args: argparse.Namespace) -> ValidationPolicy:
    try:
        deny = parse_deny(opt(args, "deny"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    given = getattr(args, "allowed_algorithms", None)  # an explicit '' is an error, not the default
    text = str(DEFAULTS["allowed_algorithms"] if given is None else given)
    allowed = frozenset(a.strip() for a in text.split(",") if a.strip())
    if not allowed:
        raise ConfigError("--allowed-algorithms is empty: name at least one, e.g. bbr,cubic")
    fraction = float(opt(args, "max_change_fraction"))
    if not 0 < fraction <= 1:
        raise ConfigError(f"--max-change-fraction {fraction} must be in (0, 1]")
    v4, v6 = int(opt(args, "v4_length")), int(opt(args, "v6_length"))
    if not (1 <= v4 <= 31 and 1 <= v6 <= 127):
        raise ConfigError("--v4-length must be 1..31 and --v6-length 1..127 (no default or host routes)")
    cap, floor = int(opt(args, "max_per_pop")), int(opt(args, "change_floor"))
    if cap < 1:
        raise ConfigError(f"--max-per-pop {cap} must be at least 1 (the kill switch empties a POP)")
    if floor < 0:
        raise ConfigError(f"--change-floor {floor} must not be negative")
    return ValidationPolicy(
        v4_length=v4,
        v6_length=v6,
        deny=deny,
        max_per_pop=cap,
        max_change_fraction=fraction,
        change_floor=floor,
        allowed_algorithms=allowed,
    )


def cap_conflicts(policy: ValidationPolicy, scoring: ScoringConfig) -> list[str]:
    """Scoring settings that validation would refuse every time (empty = consistent).  Pure.

    From an empty POP a round may change at most policy.change_limit(0) prefixes, so more
    new selections per round than that would get the POP's first config rejected forever.
    """
    problems = []
    limit = policy.change_limit(0)
    if scoring.max_new_per_round > limit:
        problems.append(
            f"--max-new {scoring.max_new_per_round} is above the change limit {limit} "
            f"(--max-change-fraction {policy.max_change_fraction:g} x --change-floor {policy.change_floor})"
        )
    if scoring.max_per_pop > policy.max_per_pop:
        problems.append(
            f"--max-bbr-per-pop {scoring.max_per_pop} is above the validation cap --max-per-pop {policy.max_per_pop}"
        )
    if scoring.algorithm not in policy.allowed_algorithms:
        allowed = ",".join(sorted(policy.allowed_algorithms))
        problems.append(f"--algorithm {scoring.algorithm!r} is not in --allowed-algorithms {allowed}")
    return problems


def rollout_settings(args: argparse.Namespace) -> RolloutSettings:
    def seconds_ns(name: str) -> int:
        return int(parse_duration(opt(args, name), f"--{name.replace('_', '-')}") * 1e9)

    thresholds = GateThresholds(
        soak_ns=seconds_ns("soak"),
        wave_timeout_ns=seconds_ns("wave_timeout"),
        min_mem_available=parse_size(opt(args, "min_mem_available"), "--min-mem-available"),
        max_load1=float(opt(args, "max_load")),
        max_p10_regression=float(opt(args, "max_p10_regression")),
        min_samples=int(opt(args, "min_samples")),
        baseline_ns=seconds_ns("baseline"),
    )
    hosts = parse_host_lists(opt(args, "hosts"), "--hosts")
    canary = parse_host_lists(opt(args, "canary_hosts"), "--canary-hosts")
    if opt(args, "inventory"):
        inv_hosts, inv_canary = load_inventory(Path(opt(args, "inventory")))
        hosts, canary = _merge(hosts, inv_hosts), _merge(canary, inv_canary)
    staging = str(opt(args, "staging"))
    if staging not in ("auto", "on", "off"):
        raise ConfigError(f"--staging {staging!r} must be auto, on or off")
    fraction = float(opt(args, "canary_fraction"))
    if not 0 < fraction <= 1:
        raise ConfigError(f"--canary-fraction {fraction} must be in (0, 1]")
    if not thresholds.max_load1 > 0:
        raise ConfigError(f"--max-load {thresholds.max_load1} must be above 0")
    if not 0 <= thresholds.max_p10_regression <= 1:
        raise ConfigError(f"--max-p10-regression {thresholds.max_p10_regression} must be in [0, 1]")
    if thresholds.min_samples < 1:
        raise ConfigError(f"--min-samples {thresholds.min_samples} must be at least 1")
    return RolloutSettings(
        thresholds=thresholds,
        canary_fraction=fraction,
        canary_hosts=canary,
        inventory=hosts,
        host_expiry_ns=seconds_ns("host_expiry"),
        holddown_ns=seconds_ns("holddown"),
        staging=staging == "on" or (staging == "auto" and bool(opt(args, "kafka"))),
        lock=bool(opt(args, "lock_cc")),
    )


@dataclass
class Publishing:
    sink: ConfigSink
    signer: Signer
    status: StatusIngestor | None


_CACHE: dict[tuple[Any, ...], Publishing] = {}


def publishing(args: argparse.Namespace) -> Publishing:
    """The sink, signer and status reader for these options (cached per process)."""
    kafka, publish_dir, key = opt(args, "kafka"), opt(args, "publish_dir"), opt(args, "private_key")
    if not key:
        raise ConfigError("--key PRIVATE_PEM is required to sign configs (create one: dyncc control keygen)")
    if not kafka and not publish_dir:
        raise ConfigError("nowhere to publish: give --kafka BROKERS or --publish-dir DIR")
    cache_key = (
        kafka,
        str(publish_dir),
        str(key),
        opt(args, "config_topic"),
        opt(args, "status_topic"),
        opt(args, "status_group"),
    )
    if cache_key not in _CACHE:
        signer = Signer.from_file(Path(key))
        sink: ConfigSink = (
            DirConfigSink(Path(publish_dir)) if publish_dir else KafkaConfigSink(kafka, opt(args, "config_topic"))
        )
        status = StatusIngestor(kafka, opt(args, "status_topic"), opt(args, "status_group")) if kafka else None
        _CACHE[cache_key] = Publishing(sink, signer, status)
        log.info(
            "publishing configs to %s (key id %s)%s",
            sink.description,
            signer.key_id,
            f"; statuses from topic {opt(args, 'status_topic')}" if status else "",
        )
    return _CACHE[cache_key]


def make_engine(store: Store, args: argparse.Namespace) -> RolloutEngine:
    pub = publishing(args)
    # args.clock (ns): the time published configs carry; the lab and demo replay set their round time.
    clock = getattr(args, "clock", None) or time.time_ns
    return RolloutEngine(store, pub.sink, pub.signer, validation_policy(args), rollout_settings(args), clock)


def ingest_statuses(store: Store, args: argparse.Namespace) -> None:
    pub = publishing(args)
    if pub.status is None:
        return
    try:
        result = pub.status.ingest(store)
    except PublishError as exc:
        log.warning("apply statuses not read this round: %s", exc)
        return
    if result.read:
        log.info("read %d apply statuses (%d stored, %d malformed)", result.read, result.inserted, result.malformed)
    _metrics(args).statuses(result.inserted, result.malformed)


class _Metrics:
    """Counters on the caller's registry (args.metrics_registry) or on a private one."""

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


_METRICS: dict[int, _Metrics] = {}


def _metrics(args: argparse.Namespace) -> _Metrics:
    from prometheus_client import CollectorRegistry

    registry = getattr(args, "metrics_registry", None)
    key = id(registry) if registry is not None else 0
    if key not in _METRICS:
        _METRICS[key] = _Metrics(registry if registry is not None else CollectorRegistry())
    return _METRICS[key]


def publish_round(store: Store, states: list[DesiredState], args: argparse.Namespace) -> dict[str, PublishOutcome]:
    """Ingest statuses, then for each POP of `states` and each POP with a rollout in flight:
    generate, validate, sign, publish, record and advance the staged rollout.

    A POP whose publish fails (sink, signer or store error) is logged and skipped (its state
    does not move); the others go on.
    Returns the outcome of each POP of `states` and appends it to round_outcomes; a
    ConfigError (no key, nowhere to publish) is raised before anything is recorded.
    """
    from controller.rollout import records as rs
    from controller.scoring.state import write_outcomes

    desired = {s.pop: s for s in states}
    try:
        engine = make_engine(store, args)
    except PublishError as exc:
        log.error("nothing published this round: %s", exc)
        outcomes = {pop: PublishOutcome(pop, PUBLISH_FAILED, reason=str(exc)) for pop in desired}
        write_outcomes(store, [(desired[pop], o) for pop, o in outcomes.items()])
        return outcomes
    ingest_statuses(store, args)
    in_flight = [
        pop
        for pop in rs.rollout_pops(store)
        if pop not in desired and rs.load_state(store, pop).phase in (CANARY, REST)
    ]
    metrics = _metrics(args)
    outcomes = {}
    for pop in sorted(desired) + in_flight:
        engine.counters = StepCounters()
        since = engine.clock()
        try:
            state = engine.step(pop, desired.get(pop))
            log.debug("%s: phase %s stable v%d wave v%d", pop, state.phase, state.stable_version, state.wave_version)
            if pop in desired:
                outcomes[pop] = _outcome(engine, desired[pop], state, since)
        except (PublishError, StoreError) as exc:
            log.error("%s: not published this round: %s", pop, exc)
            if pop in desired:
                outcomes[pop] = PublishOutcome(pop, PUBLISH_FAILED, reason=str(exc))
        finally:
            metrics.step(pop, engine.counters)
    write_outcomes(store, [(desired[pop], o) for pop, o in sorted(outcomes.items())])
    return outcomes


def _outcome(engine: RolloutEngine, desired: DesiredState, state: RolloutState, since_ns: int) -> PublishOutcome:
    """What the step did with the desired state: the config_versions row it wrote for the round
    (published / rejected / publish_failed), else why nothing was generated."""
    from controller.rollout.generate import fingerprint, generate

    rows = engine.store.query_rows(
        "SELECT status, version, reasons FROM config_versions "
        "WHERE pop = %(pop)s AND round_id = %(round_id)s AND created_ns >= %(since)s "
        "AND kind IN ('canary', 'full', 'candidate') ORDER BY created_ns DESC LIMIT 1",
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
        return PublishOutcome(desired.pop, HELD, state.stable_version, why)
    fp = fingerprint(generate(desired, 0, created_at_ns=0, lock=engine.settings.lock).entries)
    if fp == state.failed_fingerprint and since_ns - state.failed_at_ns < engine.settings.holddown_ns:
        return PublishOutcome(desired.pop, HELD, state.stable_version, "held down after a rollback")
    return PublishOutcome(desired.pop, UNCHANGED, state.stable_version)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
