"""Start-up and exit of a `dyncc collect` process (no numpy here: this runs before it loads).

- start_early_prefetch: called by the CLI before it loads the collect
  command: for `--once` with the dump given by flags alone (no --config), fork
  the dump helper straight from the command line (before the full
  option parsing would, with the dump the critical path of a one-shot run);
  the CLI discards it (discard_early_prefetch) if the command did not take it.
- start_prefetch: for --once, the early helper if it dumps what the settings
  ask, else fork one from the not yet validated settings; any problem just
  means no prefetch (the real configuration check and the in-process dump
  report it).  A prefetch the poller does not use changes nothing: the
  poller takes a prefetched dump only for the namespace, family and states
  it was asked for, and dumps anything else itself.
- start_kafka: the Kafka producer of a run, made from its settings (TLS and
  SASL from dyncc_common.kafka_security, then the `[collect.kafka]` table); a
  one-shot run makes it right after the fork, before numpy loads, so that
  librdkafka connects to the broker meanwhile (runner.make_sink takes it).
- check_kafka: the start probe of a Kafka sink: a wrong password, an untrusted
  certificate or a TLS listener spoken to in plaintext is one line, exit 2
  (ConfigError); an unreachable broker is left to the sink's queue as before.
  A one-shot run sends the probe's metadata request from a helper thread as
  soon as its producer exists (start_kafka); when the broker has answered it by
  the time the collector is loaded, the probe is done, otherwise it runs as usual.
- process_is_dyncc: True only when this process is the `dyncc` command itself
  (not a test or another program calling the CLI in-process).
- exit_now: end a finished one-shot run without the interpreter's teardown.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any

from collector.netlink.sockdiag import namespaces_to_dump, parse_states, state_mask
from collector.telemetry import timeline
from collector.telemetry.prefetch import Prefetch
from dyncc_common.errors import ConfigError

if TYPE_CHECKING:
    from collector.telemetry.settings import CollectSettings
    from collector.telemetry.sinks import KafkaStart

#: the settings that decide the kernel dump (CollectSettings dests)
DUMP_SETTINGS = ("state", "netns", "all_netns")

_early: Prefetch | None = None  # forked by start_early_prefetch, taken by start_prefetch


def dump_plan(raw: dict[str, Any]) -> tuple[list[str], int] | None:
    """(namespaces, state mask) the settings dump, or None if they cannot be prefetched."""
    try:
        states = parse_states(raw["state"])
        if not states:
            return None
        netns = [str(n) for n in raw["netns"]]
        if netns and raw["all_netns"]:
            return None  # a configuration error, reported later
        return namespaces_to_dump(netns, bool(raw["all_netns"])), state_mask(states)
    except (ConfigError, TypeError, ValueError, OSError):
        return None


def start_early_prefetch(argv: list[str]) -> None:
    """For `dyncc collect --once` whose dump is given by flags alone: fork the dump helper now."""
    global _early
    if "--once" not in argv or any(a in ("-h", "--help") or a.startswith("--config") for a in argv):
        return
    # The options that decide the dump, from the same rows as the full parser (CollectSettings);
    # anything this reads differently only means the helper's dump is not used.
    from collector.telemetry.settings import CollectSettings

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    CollectSettings.add_arguments(parser, only=DUMP_SETTINGS)
    try:
        given = vars(parser.parse_known_args(argv)[0])
    except SystemExit:  # argparse's error exit: the full parser reports it
        return
    defaults = CollectSettings.defaults()
    plan = dump_plan({key: given.get(key, defaults[key]) for key in DUMP_SETTINGS})
    if plan is not None:
        _early = Prefetch.start(*plan)
        timeline.mark("forked")


def discard_early_prefetch() -> None:
    """Stop the early dump helper if start_prefetch() did not take it."""
    global _early
    if _early is not None:
        _early.close()
        _early = None


def start_prefetch(raw: dict[str, Any]) -> Prefetch | None:
    """The dump helper for these raw settings (defaults < TOML < flags), or None."""
    global _early
    early, _early = _early, None
    plan = dump_plan(raw)
    if early is not None:
        if plan is not None and early.plan() == plan:
            return early
        early.close()
    if plan is None:
        return None
    started = Prefetch.start(*plan)
    timeline.mark("forked")
    return started


def start_kafka(cfg: CollectSettings) -> KafkaStart:
    """The Kafka producer of a --sink kafka run, created now (its error kept for the sink to raise)."""
    from collector.telemetry.sinks import KafkaStart
    from dyncc_common.kafka_security import librdkafka_options

    start = KafkaStart(
        cfg.brokers,
        cfg.host,
        linger_ms=min(cfg.linger_ms, 5) if cfg.once else cfg.linger_ms,
        extra={**librdkafka_options(cfg.kafka_security), **cfg.kafka},  # ConfigError: a password file, ...
        quiet=cfg.once,  # the run's one closing line says what went wrong
    )
    if cfg.once:  # the start probe's request, answered while numpy loads (check_kafka)
        start.ask_metadata(cfg.topic)
    timeline.mark("producer")
    return start


#: the longest start probe of a Kafka sink (a --once run: at most its --flush-timeout)
PROBE_SECONDS = 5.0


def check_kafka(cfg: CollectSettings, sink: Any) -> None:
    """Ask the sink's broker for metadata: KafkaSecurityError (a ConfigError) when it refuses
    the client's credentials or certificate; an unreachable broker only returns (its outage is
    ridden out by the sink's queue, and a --once run says so in its closing line)."""
    from dyncc_common.kafka_security import probe

    start = getattr(sink, "start", None)
    if start is not None and start.answered():  # the early request of a one-shot run (start_kafka)
        timeline.mark("probed")
        return
    timeout = min(PROBE_SECONDS, cfg.flush_timeout) if cfg.once else PROBE_SECONDS
    probe(sink.producer, sink.kafka_log, cfg.brokers, timeout, cfg.topic, give_up_refused=True)
    timeline.mark("probed")


def process_is_dyncc() -> bool:
    """Whether the running program is the dyncc CLI (the console script or `python -m dyncc.cli`)."""
    main = sys.modules.get("__main__")
    entry = getattr(main, "main", None)
    if getattr(entry, "__module__", None) == "dyncc.cli":
        return True
    spec = getattr(main, "__spec__", None)
    return getattr(spec, "name", None) == "dyncc.cli"


def exit_now(code: int) -> None:
    """Flush logs and stdio, then _exit(code): only once every sink is closed and checked."""
    import logging  # loaded by then; not at import, which runs before the dump helper is forked

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed, or its reader went away
            stream.flush()
    os._exit(code)
