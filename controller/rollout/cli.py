"""`dyncc control` actions of the rollout component: keygen, rollout status|advance, kill-switch.

    dyncc control keygen --out-dir DIR [--name dyncc-config] [--force]
    dyncc control rollout status --clickhouse URL [--pop POP]
    dyncc control [--kafka B|--publish-dir D] --key PEM rollout advance --clickhouse URL
    dyncc control kill-switch (--pop POP ...|--all) [--release] [--force] --clickhouse URL --key PEM
                              (--kafka BROKERS|--publish-dir DIR)

controller/control/cli.py calls `register(subparsers)` to add them and
`run(args)` to run them (None when the action is not one of these).  Options
that also exist on the main `dyncc control` parser (--kafka, --publish-dir,
--key, --config-topic, --status-topic, --clickhouse) default to SUPPRESS here so
a value given before the action name is not overwritten.

Bad input is a ConfigError (one line, exit 2) found before anything is
published: a malformed POP name, publishing options that cannot work (no or
unreadable --key, nowhere to publish, bad validation or rollout settings), and
for kill-switch a POP the store does not know (no telemetry, no published
config; controller/store/pops.py) unless --force.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

from dyncc_common.errors import ConfigError
from dyncc_common.names import check_brokers, check_pop, check_topic
from dyncc_common.runtime import setup_logging

log = logging.getLogger("dyncc.rollout")

ACTIONS = ("keygen", "rollout", "kill-switch")


def _shared(parser: argparse.ArgumentParser, *, publish: bool) -> None:
    s = argparse.SUPPRESS
    parser.add_argument(
        "--clickhouse",
        metavar="URL",
        default=s,
        help="store URL: clickhouse://user:pass@host:port/db or chdb:///path/dir",
    )
    if publish:
        parser.add_argument("--kafka", metavar="BROKERS", default=s, help="publish to this Kafka")
        parser.add_argument(
            "--publish-dir", type=Path, metavar="DIR", default=s, help="write DIR/<pop>.cfg instead of Kafka"
        )
        parser.add_argument(
            "--key",
            dest="private_key",
            type=Path,
            metavar="PRIVATE_PEM",
            default=s,
            help="Ed25519 private key that signs configs",
        )
        parser.add_argument("--config-topic", default=s, help="compacted config topic (dyncc-configs)")
        parser.add_argument("--status-topic", default=s, help="ApplyStatus topic (dyncc-apply-status)")


def register(subparsers: Any) -> None:
    keygen = subparsers.add_parser("keygen", help="write an Ed25519 key pair for signing configs")
    keygen.add_argument("--out-dir", type=Path, required=True, metavar="DIR")
    keygen.add_argument("--name", default="dyncc-config", help="file names NAME.key / NAME.pub")
    keygen.add_argument("--force", action="store_true", help="overwrite an existing key pair")

    rollout = subparsers.add_parser("rollout", help="staged rollout: status, or advance the gates now")
    rollout.add_argument(
        "rollout_action",
        choices=["status", "advance"],
        help="status: where each POP and host stands; advance: ingest statuses and "
        "run the wave gates once (publish options as for a round)",
    )
    rollout.add_argument(
        "--pop", dest="status_pops", action="append", default=[], metavar="POP", help="only these POPs (repeatable)"
    )
    _shared(rollout, publish=True)

    kill = subparsers.add_parser("kill-switch", help="publish an empty signed config: agents drop every route")
    target = kill.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--pop", dest="kill_pops", action="append", default=[], metavar="POP", help="the POP (repeatable)"
    )
    target.add_argument("--all", dest="kill_all", action="store_true", help="every POP known to the store")
    kill.add_argument(
        "--release", action="store_true", help="release the kill switch: rounds publish again (staged, from empty)"
    )
    kill.add_argument(
        "--force",
        action="store_true",
        help="also for a POP the store does not know (no telemetry and no published config)",
    )
    _shared(kill, publish=True)


def _store(args: argparse.Namespace) -> Any:
    from controller.store import open_store
    from controller.store.migrate import apply_migrations

    url = getattr(args, "clickhouse", None)
    if not url:
        raise ConfigError("--clickhouse URL is required")
    store = open_store(url)
    apply_migrations(store)
    return store


_KEY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_publish_options(args: argparse.Namespace) -> None:
    """ConfigError (one line) when the publishing options cannot work; nothing is published."""
    from controller.rollout.publish import opt, rollout_settings, validation_policy
    from controller.rollout.signing import Signer

    kafka, publish_dir, key = opt(args, "kafka"), opt(args, "publish_dir"), opt(args, "private_key")
    if not key:
        raise ConfigError("--key PRIVATE_PEM is required to sign configs (create one: dyncc control keygen)")
    if not kafka and not publish_dir:
        raise ConfigError("nowhere to publish: give --kafka BROKERS or --publish-dir DIR")
    if kafka:
        check_brokers(str(kafka), "--kafka")
        check_topic(str(opt(args, "config_topic")), "--config-topic")
        check_topic(str(opt(args, "status_topic")), "--status-topic")
    if publish_dir:
        directory = Path(publish_dir)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create --publish-dir {directory}: {exc.strerror or exc}") from exc
        if not os.access(directory, os.W_OK | os.X_OK):
            raise ConfigError(f"--publish-dir {directory} is not writable")
    Signer.from_file(Path(key))
    validation_policy(args)
    rollout_settings(args)


def run(args: argparse.Namespace) -> int | None:
    action = getattr(args, "action", None)
    if action not in ACTIONS:
        return None
    if action == "keygen":
        from controller.rollout.signing import keygen

        if not _KEY_NAME.match(args.name):
            raise ConfigError(f"bad --name {args.name!r}: letters, digits, '_', '.' or '-' (a file name, no '/')")
        try:
            private_path, public_path = keygen(args.out_dir, args.name, args.force)
        except OSError as exc:
            raise ConfigError(f"cannot write a key pair in {args.out_dir}: {exc.strerror or exc}") from exc
        print(
            f"wrote {private_path} (private, mode 0600: the controller's --key) and "
            f"{public_path} (public: every agent's --public-key)"
        )
        return 0
    setup_logging(bool(getattr(args, "verbose", False)))
    for pop in [*getattr(args, "kill_pops", []), *getattr(args, "status_pops", [])]:
        check_pop(pop)
    if not getattr(args, "clickhouse", None):
        raise ConfigError("--clickhouse URL is required")
    if action == "kill-switch" or args.rollout_action == "advance":
        check_publish_options(args)
    store = _store(args)
    try:
        if action == "rollout":
            if args.rollout_action == "advance":
                from controller.rollout.publish import publish_round

                publish_round(store, [], args)
            print(rollout_status(store, args.status_pops), end="")
            return 0
        return _kill_switch(store, args)
    finally:
        store.close()


def _kill_switch(store: Any, args: argparse.Namespace) -> int:
    from controller.rollout import records as rs
    from controller.rollout.publish import make_engine, rollout_settings
    from controller.rollout.sinks import PublishError

    pops = list(args.kill_pops)
    if args.kill_all:
        pops = sorted(set(rs.known_pops(store)) | set(rollout_settings(args).inventory))
        if not pops:
            raise ConfigError("no POP known to the store or inventory; name one with --pop")
    elif not args.force:
        from controller.store.pops import require_known_pops

        require_known_pops(store, pops, hint="--force publishes the kill switch anyway")
    try:
        engine = make_engine(store, args)
    except PublishError as exc:
        raise ConfigError(str(exc)) from exc
    failed = []
    for pop in pops:
        if args.release:
            engine.release(pop)
            print(f"{pop}: kill switch released")
            continue
        try:
            version = engine.kill(pop)
        except PublishError as exc:
            failed.append(pop)
            print(f"{pop}: KILL SWITCH NOT PUBLISHED: {exc}")
            continue
        print(f"{pop}: kill switch published as v{version} to {engine.sink.description}")
    return 1 if failed else 0


def _ago(ns: int, now_ns: int) -> str:
    if ns <= 0:
        return "never"
    seconds = max(0, (now_ns - ns) // 10**9)
    if seconds < 120:
        return f"{seconds}s ago"
    if seconds < 7200:
        return f"{seconds // 60}m ago"
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def rollout_status(store: Any, pops: list[str] | None = None, now_ns: int | None = None) -> str:
    """A text table: per POP its phase and versions, per host its applied version, result and health."""
    from controller.rollout import records as rs

    now = now_ns or time.time_ns()
    wanted = pops or rs.known_pops(store)
    if not wanted:
        return "no POP has a config, a rollout or a host report yet\n"
    out: list[str] = []
    for pop in wanted:
        state = rs.load_state(store, pop)
        wave = ""
        if state.phase in ("canary", "rest"):
            target = ", ".join(state.wave_hosts) if state.phase == "canary" else f"{len(state.wave_hosts)} hosts"
            wave = f", wave v{state.wave_version} -> {target} (started {_ago(state.wave_started_ns, now)})"
        out.append(
            f"POP {pop}: {state.phase.upper()}  stable v{state.stable_version}{wave}  "
            f"[{state.event or 'no rollout yet'} {_ago(state.updated_ns, now)}]"
        )
        if state.reason:
            out.append(f"  reason: {state.reason}")
        reports = rs.latest_reports(store, pop, 0)
        if reports:
            out.append(
                f"  {'host':<20} {'applied':>8} {'last result':<20} {'mem avail':>10} {'load1':>6}  "
                f"{'role':<7} reported"
            )
            for host, r in sorted(reports.items()):
                role = "canary" if state.phase == "canary" and host in state.wave_hosts else ""
                out.append(
                    f"  {host:<20} {'v' + str(r.applied_version):>8} "
                    f"{(r.result + ' v' + str(r.version)):<20} "
                    f"{r.mem_available_bytes / 2**20:>8.0f}Mi "
                    f"{r.load1:>6.2f}  {role:<7} {_ago(r.received_ns, now)}"
                )
                if r.errors and r.result not in ("APPLIED", "UNCHANGED"):
                    out.append(f"  {'':<20} errors: {'; '.join(r.errors[:3])}")
        else:
            out.append("  no host has reported")
        history = rs.config_history(store, pop, limit=5)
        if history:
            items = []
            for version, status, kind, entries, targets, reasons, _created in history:
                to = f" -> {','.join(list(targets))}" if len(list(targets)) else ""
                why = f" ({next(iter(reasons))})" if status == "rejected" and len(list(reasons)) else ""
                items.append(f"v{int(version)} {status} {kind} {int(entries)} prefixes{to}{why}")
            out.append("  recent configs: " + " | ".join(items))
    return "\n".join(out) + "\n"
