"""`dyncc agent`: apply signed per-prefix congestion configs as routes on an edge host.

    dyncc agent --kafka BROKERS --pop POP --public-key PEM [--public-key PEM2 | --public-key-dir DIR] ...
    dyncc agent --from-file CONFIG --once --pop POP --public-key PEM [--netns NAME]

The agent trusts every public key it is given (a key set by key id: a key rotation adds
the new key, switches the controller, then removes the old one; docs/rollout.md).

The Kafka mode reconciles at start, applies each new config for its POP,
reconciles every --reconcile-every and whenever a covering route changes, and
reports an ApplyStatus each time.  `--enforce bpf` keeps the same checks and
reports but writes a sock_ops program's maps instead of routes (docs/enforce.md;
no route watching then).  --from-file --once is the break-glass path:
same checks, the status is printed as JSON on stdout; exit 0 when applied or
unchanged, 1 when refused or rolled back.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from collector.agent.settings import AgentSettings
from dyncc_common.errors import ConfigError
from dyncc_common.kafka_security import librdkafka_options
from dyncc_common.runtime import StopFlag, setup_logging, start_metrics

if TYPE_CHECKING:
    from collector.agent.bpf.apply import BpfApplier
    from collector.agent.core import Agent
    from schemas.congestion_pb2 import CongestionConfig

log = logging.getLogger("dyncc.agent")


SETTINGS = AgentSettings
#: the start probe of --kafka: a refused password or certificate is one line, exit 2
KAFKA_PROBE_SECONDS = 10.0


def _read_config_file(path: Path) -> CongestionConfig:
    from google.protobuf import json_format
    from google.protobuf.message import DecodeError

    from schemas.congestion_pb2 import CongestionConfig

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    try:
        if data.lstrip()[:1] == b"{":
            return json_format.Parse(data.decode(), CongestionConfig())
        return CongestionConfig.FromString(data)
    except (DecodeError, json_format.ParseError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} is not a CongestionConfig: {exc}") from exc


def _build_agent(settings: AgentSettings) -> Agent:
    from collector.agent.core import Agent, AgentMetrics
    from collector.agent.plan import EdgePolicy
    from collector.agent.routes import RouteTable
    from collector.agent.state import AgentState, StateError, default_state_dir
    from schemas.signing import KeySet

    try:
        public_key = KeySet.load(settings.public_key, settings.public_key_dir)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load public key {exc}") from exc
    state_dir = settings.state_dir or default_state_dir(settings.pop)
    try:
        state = AgentState(state_dir, settings.pop).load()
    except StateError as exc:
        raise ConfigError(str(exc)) from exc
    table = None
    if settings.enforce == "route":
        try:
            table = RouteTable(settings.netns, proto=settings.proto)
        except OSError as exc:
            raise ConfigError(f"cannot open netlink in {settings.netns or 'this namespace'}: {exc}") from exc
    return Agent(
        pop=settings.pop,
        host=settings.host,
        netns=settings.netns,
        public_key=public_key,
        state=state,
        table=table,
        applier=None if table is not None else _bpf_applier(settings, state_dir),
        metrics=AgentMetrics(),
        policy=EdgePolicy.from_texts(settings.allow, settings.deny),  # checked by AgentSettings
        max_config_age=settings.max_config_age,
    )


def _log_trusted_keys(agent: Agent) -> None:
    """One start line naming the key ids the agent trusts (after the start checks: a refused start
    stays one line)."""
    from schemas.signing import KeySet

    if isinstance(agent.public_key, KeySet):
        log.info("trusting %d public keys: %s", len(agent.public_key.ids), " ".join(agent.public_key.ids))


def _refusals(settings: AgentSettings) -> str:
    """The start line's account of what this edge refuses."""
    allow = f"only inside {', '.join(settings.allow)}" if settings.allow else "any prefix"
    deny = f", never {', '.join(settings.deny)}" if settings.deny else ""
    age = f", configs older than {settings.max_config_age:g}s refused" if settings.max_config_age else ""
    return f"routes {allow}, never the built-in ranges{deny}{age}"


def _bpf_applier(settings: AgentSettings, state_dir: Path) -> BpfApplier:
    """The eBPF enforcement of `settings` (object built now unless --bpf-object; ConfigError when impossible)."""
    from collector.agent.bpf.apply import BpfApplier, netns_cookie
    from collector.agent.bpf.build import BpfBuildError, build_object
    from collector.agent.bpf.prog import BpfProgram, BpfProgramError, default_cgroup

    cgroup = settings.bpf_cgroup or default_cgroup()
    if cgroup is None:
        raise ConfigError("--enforce bpf: no cgroup v2 hierarchy is mounted (give --bpf-cgroup)")
    try:
        obj = settings.bpf_object or build_object(state_dir / "bpf")
        program = BpfProgram(settings.bpf_pin_dir or default_pin_dir(settings.pop), cgroup, obj)
        cookie = netns_cookie(settings.netns)
    except (BpfBuildError, BpfProgramError, OSError) as exc:
        raise ConfigError(f"--enforce bpf: {exc}") from exc
    return BpfApplier(program, netns_cookie=cookie)


def default_pin_dir(pop: str) -> Path:
    return Path("/sys/fs/bpf/dyncc") / pop


def _run_once(settings: AgentSettings) -> int:
    from google.protobuf import json_format

    from schemas.congestion_pb2 import ApplyStatus

    assert settings.from_file is not None  # AgentSettings: --once goes with --from-file
    config = _read_config_file(settings.from_file)
    agent = _build_agent(settings)
    _log_trusted_keys(agent)
    try:
        status = agent.handle(config)
    finally:
        agent.close()
    print(json_format.MessageToJson(status, indent=None, preserving_proto_field_name=True))
    return 0 if status.result in (ApplyStatus.APPLIED, ApplyStatus.UNCHANGED) else 1


def _run_kafka(settings: AgentSettings) -> int:
    from collector.agent.events import RouteEventWatcher
    from collector.agent.kafka import ConfigConsumer, StatusProducer

    assert settings.kafka is not None  # AgentSettings: exactly one of --kafka and --from-file
    every = settings.reconcile_every
    agent = _build_agent(settings)
    metrics = agent.metrics
    start_metrics(settings.metrics_port, metrics.registry, settings.metrics_address)
    stop = StopFlag()
    watcher = RouteEventWatcher(settings.netns, settings.proto) if settings.enforce == "route" else None
    options = librdkafka_options(settings.kafka_security)  # TLS / SASL (ConfigError: a password file, ...)
    consumer = ConfigConsumer(
        settings.kafka,
        settings.config_topic,
        settings.pop,
        settings.host,
        on_error=lambda _e: metrics.kafka_errors.inc(),
        on_malformed=metrics.malformed.inc,
        options=options,
    )
    try:
        unanswered = consumer.check(KAFKA_PROBE_SECONDS)  # a refused password or certificate: exit 2
    except ConfigError:
        consumer.close()
        agent.close()
        raise
    if unanswered is not None:
        log.warning("Kafka %s not answering yet (%s): waiting for it", settings.kafka, unanswered)
    producer = StatusProducer(
        settings.kafka, settings.status_topic, on_error=lambda _e: metrics.kafka_errors.inc(), options=options
    )
    _log_trusted_keys(agent)
    log.info(
        "agent for POP %s on %s (netns %s, enforce %s, proto %d): config v%d in force, reconcile every %gs; %s",
        settings.pop,
        settings.host,
        settings.netns or "-",
        settings.enforce,
        settings.proto,
        agent.state.version,
        every,
        _refusals(settings),
    )
    try:
        with stop.installed():
            if watcher is not None:
                watcher.start()
            producer.send(agent.reconcile("start"))
            next_reconcile = time.monotonic() + every
            while not stop.is_set():
                configs = consumer.poll(0.25)
                for config in configs:
                    producer.send(agent.handle(config))
                if configs:
                    next_reconcile = time.monotonic() + every
                if watcher is not None and watcher.changed.is_set():
                    stop.wait(0.2)  # let a burst of route changes settle
                    watcher.changed.clear()
                    metrics.route_events.inc()
                    producer.send(agent.reconcile("route-change"))
                if time.monotonic() >= next_reconcile:
                    producer.send(agent.reconcile("periodic"))
                    next_reconcile = time.monotonic() + every
        kept = "owned routes stay" if settings.enforce == "route" else "the attached program and its maps stay"
        log.info("stopping (%s): %s in place", stop.signal_name or "stop", kept)
    finally:
        if watcher is not None:
            watcher.stop()
        consumer.close()
        left = producer.flush(10)
        if left:
            log.warning("%d status messages not delivered at shutdown", left)
        agent.close()
    return 0


def run(settings: AgentSettings) -> int:
    setup_logging(settings.verbose)  # logs go to stderr; with --from-file stdout carries the JSON status
    settings.check_host()
    if settings.from_file:
        return _run_once(settings)
    return _run_kafka(settings)
