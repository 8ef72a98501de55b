"""`dyncc control` actions of the rollout component: keygen, rollout status|advance, kill-switch.

    dyncc control keygen --out-dir DIR [--name dyncc-config] [--force]
    dyncc control rollout status --clickhouse URL [--pop POP] [--kafka BROKERS]
    dyncc control [--kafka B|--publish-dir D] --key PEM rollout advance --clickhouse URL
    dyncc control kill-switch (--pop POP ...|--all) [--release] [--force] --clickhouse URL --key PEM
                              (--kafka BROKERS|--publish-dir DIR)

controller/control/cli.py builds the sub-parsers from the settings tables
(controller/rollout/settings.py) and calls `keygen(settings)`,
`rollout(store_url, cfg, settings)` or `kill_switch(store_url, cfg, settings)` with
the settings objects.

Bad input is a ConfigError (one line, exit 2) found before anything is
published: a malformed POP name, publishing options that cannot work (no or
unreadable --key, nowhere to publish, bad validation or rollout settings), and
for kill-switch a POP the store does not know (no telemetry, no published
config; controller/store/pops.py) unless --force; for rollout status|advance a --pop the
store knows nothing of (no telemetry, config, rollout or host report), which would
otherwise print "IDLE stable v0" for a typo.

`rollout status` with --kafka also shows each host's report that is on the status topic
but not yet stored by a round (read without committing: the rounds' offsets stay put), so
a host's applied version is the one it reported last, not one round late.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

from controller.rollout.settings import KeygenSettings, KillSwitchSettings, RolloutActionSettings, RolloutSettings
from controller.rollout.state import HostReport
from dyncc_common.errors import ConfigError
from dyncc_common.names import check_brokers, check_topic

__all__ = ["check_publish_options", "keygen", "kill_switch", "rollout", "rollout_status"]

log = logging.getLogger("dyncc.rollout")


def _store(url: str | None) -> Any:
    from controller.store import open_store
    from controller.store.migrate import apply_migrations

    if not url:
        raise ConfigError("--clickhouse URL is required")
    store = open_store(url)
    apply_migrations(store)
    return store


_KEY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_publish_options(cfg: RolloutSettings) -> None:
    """ConfigError (one line) when the publishing options cannot work; nothing is published."""
    from controller.rollout.signing import Signer

    if not cfg.private_key:
        raise ConfigError("--key PRIVATE_PEM is required to sign configs (create one: dyncc control keygen)")
    if not cfg.kafka and not cfg.publish_dir:
        raise ConfigError("nowhere to publish: give --kafka BROKERS or --publish-dir DIR")
    if cfg.kafka:
        check_brokers(str(cfg.kafka), "--kafka")
        check_topic(cfg.config_topic, "--config-topic")
        check_topic(cfg.status_topic, "--status-topic")
    if cfg.publish_dir:
        directory = Path(cfg.publish_dir)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create --publish-dir {directory}: {exc.strerror or exc}") from exc
        if not os.access(directory, os.W_OK | os.X_OK):
            raise ConfigError(f"--publish-dir {directory} is not writable")
    Signer.from_file(Path(cfg.private_key))
    cfg.host_lists()  # reads --inventory


def keygen(settings: KeygenSettings) -> int:
    from controller.rollout.signing import keygen as write_key_pair

    if not _KEY_NAME.match(settings.name):
        raise ConfigError(f"bad --name {settings.name!r}: letters, digits, '_', '.' or '-' (a file name, no '/')")
    try:
        private_path, public_path = write_key_pair(settings.out_dir, settings.name, settings.force)
    except OSError as exc:
        raise ConfigError(f"cannot write a key pair in {settings.out_dir}: {exc.strerror or exc}") from exc
    from schemas.signing import key_id, load_public_key

    print(
        f"wrote {private_path} (private, mode 0600: the controller's --key) and "
        f"{public_path} (public: every agent's --public-key)"
    )
    print(f"key id {key_id(load_public_key(public_path))} (configs signed with it carry it; docs/rollout.md: rotation)")
    return 0


def rollout(store_url: str | None, cfg: RolloutSettings, settings: RolloutActionSettings) -> int:
    """`rollout status` prints the table; `rollout advance` ingests statuses and runs the gates once."""
    if not store_url:
        raise ConfigError("--clickhouse URL is required")
    if settings.rollout_action == "advance":
        check_publish_options(cfg)
    store = _store(store_url)
    try:
        if settings.status_pops:  # a typo would print "IDLE stable v0" for a POP that does not exist
            require_status_pops(store, list(settings.status_pops))
        if settings.rollout_action == "advance":
            from controller.rollout.publish import Publisher

            Publisher(store, cfg).publish_round([])
        pending, note = _pending_reports(cfg) if settings.rollout_action == "status" else ({}, "")
        print(rollout_status(store, list(settings.status_pops), pending=pending), end="")
        if note:
            print(note)
        return 0
    finally:
        store.close()


def _pending_reports(cfg: RolloutSettings) -> tuple[dict[str, dict[str, HostReport]], str]:
    """The reports on the status topic that no round has read yet (with --kafka), read without
    committing, and a line for the operator when they could not be read."""
    if not cfg.kafka:
        return {}, ""
    from controller.rollout import records as rs
    from controller.rollout.sinks import PublishError
    from controller.rollout.statuses import StatusIngestor
    from dyncc_common.kafka_security import librdkafka_options

    reader = StatusIngestor(
        cfg.kafka, cfg.status_topic, cfg.status_group, options=librdkafka_options(cfg.kafka_security), timeout=10.0
    )
    try:
        batch = reader.pending()
    except PublishError as exc:
        return {}, f"note: host reports newer than the last round not shown: {exc}"
    return rs.pending_reports(batch.rows), ""


def require_status_pops(store: Any, pops: list[str]) -> None:
    """ConfigError (exit 2, one line naming the known POPs) for a --pop of `rollout status|advance`
    that the store knows nothing of: no telemetry, no config, no rollout and no host report."""
    from controller.rollout import records as rs
    from controller.store.pops import known_pops, unknown_pop_message

    known = sorted(set(known_pops(store)) | set(rs.known_pops(store)))
    for pop in pops:
        message = unknown_pop_message(pop, known, hint="no rollout and no host report either")
        if message is not None:
            raise ConfigError(message)


def kill_switch(store_url: str | None, cfg: RolloutSettings, settings: KillSwitchSettings) -> int:
    if not store_url:
        raise ConfigError("--clickhouse URL is required")
    check_publish_options(cfg)
    store = _store(store_url)
    try:
        return _kill_switch(store, cfg, settings)
    finally:
        store.close()


def _kill_switch(store: Any, cfg: RolloutSettings, settings: KillSwitchSettings) -> int:
    from controller.rollout import records as rs
    from controller.rollout.publish import Publisher
    from controller.rollout.sinks import PublishError

    pops = list(settings.kill_pops)
    if settings.kill_all:
        pops = sorted(set(rs.known_pops(store)) | set(cfg.host_lists()[0]))
        if not pops:
            raise ConfigError("no POP known to the store or inventory; name one with --pop")
    elif not settings.force:
        from controller.store.pops import require_known_pops

        require_known_pops(store, pops, hint="--force publishes the kill switch anyway")
    try:
        engine = Publisher(store, cfg).engine()
    except PublishError as exc:
        raise ConfigError(str(exc)) from exc
    failed = []
    for pop in pops:
        if settings.release:
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


def _newer(pending: HostReport, stored: HostReport) -> bool:
    """Whether a report not yet stored is the host's later one (a round may have stored it since)."""
    return pending.reported_ns > stored.reported_ns or pending.applied_version > stored.applied_version


def _ago(ns: int, now_ns: int) -> str:
    if ns <= 0:
        return "never"
    seconds = max(0, (now_ns - ns) // 10**9)
    if seconds < 120:
        return f"{seconds}s ago"
    if seconds < 7200:
        return f"{seconds // 60}m ago"
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def rollout_status(
    store: Any,
    pops: list[str] | None = None,
    now_ns: int | None = None,
    pending: dict[str, dict[str, HostReport]] | None = None,
) -> str:
    """A text table: per POP its phase and versions, per host its applied version, result and health.

    `pending`: per POP and host, a report on the status topic that no round has stored yet
    (`_pending_reports`); it is shown instead of the host's stored one, marked `*`, so a host's
    version is the one it reported last, not the one the last round read."""
    from controller.rollout import records as rs

    now = now_ns or time.time_ns()
    pending = pending or {}
    wanted = pops or sorted(set(rs.known_pops(store)) | set(pending))
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
        newer = {h: r for h, r in pending.get(pop, {}).items() if h not in reports or _newer(r, reports[h])}
        reports.update(newer)
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
                    f"{r.load1:>6.2f}  {role:<7} "
                    + (f"{_ago(r.reported_ns, now)} *" if host in newer else _ago(r.received_ns, now))
                )
                if r.errors and r.result not in ("APPLIED", "UNCHANGED"):
                    out.append(f"  {'':<20} errors: {'; '.join(r.errors[:3])}")
        else:
            out.append("  no host has reported")
        if newer:
            out.append(f"  * {len(newer)} on the status topic, not yet read by a round (time: the host's)")
        history = rs.config_history(store, pop, limit=5)
        if history:
            items = []
            for version, status, kind, entries, targets, reasons, _created in history:
                to = f" -> {','.join(list(targets))}" if len(list(targets)) else ""
                why = f" ({next(iter(reasons))})" if status == "rejected" and len(list(reasons)) else ""
                items.append(f"v{int(version)} {status} {kind} {int(entries)} prefixes{to}{why}")
            out.append("  recent configs: " + " | ".join(items))
    return "\n".join(out) + "\n"
