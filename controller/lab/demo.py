"""`dyncc demo`: the whole loop on the embedded store (chDB), no servers, a few minutes.

As root: a `dyncc lab` run (default 3 minutes of 20-second rounds) with live
routes on the lab edge, then the HTML report built from that run's telemetry
replayed on a 5-minute time base (each 20 s round becomes one 5-minute bucket).
Without root (or with --replay): says why in one line, replays the recorded lab
telemetry committed in demo/ through the ingest writer, runs the scoring rounds
and writes the report.  Ends with a summary and the report's path.  Every option
is checked (one line, exit 2) before a directory is made or a lab is built: the flags
come from DemoSettings (controller/lab/settings.py); controller/cli.py calls run(settings).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from controller.lab.settings import DemoSettings
from dyncc_common.errors import ConfigError
from dyncc_common.runtime import StopFlag, setup_logging

log = logging.getLogger("dyncc.demo")


SETTINGS = DemoSettings


def check_args(settings: DemoSettings) -> float:
    """The live lab's duration in seconds; ConfigError for any bad option (nothing is created)."""
    duration = settings.duration
    if settings.round_seconds < 2:
        raise ConfigError(f"bad --round-seconds {settings.round_seconds}: at least 2")
    if duration < 3 * settings.round_seconds:
        raise ConfigError("--duration must cover at least 3 rounds")
    if settings.recording is not None and not Path(settings.recording).is_file():
        raise ConfigError(f"--recording {settings.recording}: no such file")
    if settings.workdir is not None and Path(settings.workdir).exists() and not Path(settings.workdir).is_dir():
        raise ConfigError(f"bad --workdir {settings.workdir}: not a directory")
    if settings.output is not None:
        from controller.report.cli import check_output

        check_output(str(settings.output))
    return duration


def _workdir(settings: DemoSettings) -> Path:
    if settings.workdir:
        try:
            settings.workdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create --workdir {settings.workdir}: {exc.strerror or exc}") from exc
        return Path(settings.workdir).resolve()
    return Path(tempfile.mkdtemp(prefix="dyncc-demo-"))


def why_replay(settings: DemoSettings) -> str:
    """'' when the live lab can run, else the one-line reason for replaying."""
    if settings.replay:
        return "--replay given"
    if os.geteuid() != 0:
        return "not root: the live lab needs root for network namespaces and routes"
    from controller.lab.cli import require_lab_host

    try:
        require_lab_host()
    except ConfigError as exc:
        return str(exc)
    return ""


def run(settings: DemoSettings) -> int:
    setup_logging(settings.verbose)
    duration = check_args(settings)
    workdir = _workdir(settings)
    report_path = settings.output or workdir / "dyncc-demo-report.html"
    reason = why_replay(settings)
    if reason:
        recording = settings.recording or _default_recording()
        print(f"dyncc demo: {reason}; replaying recorded lab telemetry from {recording}", flush=True)
        return _replay_demo(recording, workdir, report_path)
    return _live_demo(settings, duration, workdir, report_path)


def _default_recording() -> Path:
    from controller.lab.replay import DEFAULT_RECORDING

    return DEFAULT_RECORDING


def _chdb_url(workdir: Path, database: str) -> str:
    return f"chdb://{workdir / 'chdb'}?database={database}"


def _replay_into(recording: Path, workdir: Path, database: str) -> tuple[Any, Any, dict[str, Any]]:
    """Replay `recording` into a fresh database; returns (store, ReplayResult, meta)."""
    from controller.lab.control import LabControl, lab_scoring_config
    from controller.lab.replay import replay
    from controller.lab.run import open_lab_store
    from controller.lab.telemetry import RecordingError, read_recording

    try:
        records, meta = read_recording(recording)
    except RecordingError as exc:
        raise ConfigError(str(exc)) from exc
    if not records:
        raise ConfigError(f"recording {recording} holds no telemetry")
    try:
        scoring = lab_scoring_config(
            300,
            int(meta["lookback_buckets"]),
            int(meta["min_buckets"]),
            float(meta["threshold_quantile"]),
            float(meta.get("holdout_fraction", 0.0)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        why = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ConfigError(f"recording {recording}: bad metadata ({why})") from exc
    store = open_lab_store(_chdb_url(workdir, database))
    control = LabControl(store, pop=str(meta.get("pop", "lab")), scoring=scoring, workdir=workdir / database)
    result = replay(store, records, meta, control)
    return store, result, meta


def replay_summary(result: Any, meta: dict[str, Any]) -> str:
    profiles: dict[str, str] = meta.get("prefixes", {})
    last = result.rounds[-1] if result.rounds else None
    selected = sorted(p for p, s in last.scores.items() if s.decision in ("select", "keep")) if last else []
    configured = sorted(last.routes) if last else []
    routed_cc, other_cc = Counter[str](), Counter[str]()
    for by_prefix in result.new_sockets.values():
        # recorded sockets carry the congestion control the live lab's routes gave them
        for prefix, cc in by_prefix.items():
            (routed_cc if prefix in set(configured) else other_cc).update(cc)
    share = lambda c: (  # noqa: E731
        f"{sum(n for k, n in c.items() if k.startswith('bbr'))}/{sum(c.values())}" if c else "none"
    )
    return "\n".join(
        [
            f"replayed {result.batches} batches ({result.rows} socket samples) as "
            f"{result.dilation.buckets} five-minute rounds",
            "selected for bbr: " + (", ".join(f"{p} ({profiles.get(p, '?')})" for p in selected) or "none"),
            "in the published config: " + (", ".join(configured) or "none") + " (replay: no edge routes are touched)",
            f"bbr on new sockets (as recorded in the lab): selected prefixes {share(routed_cc)}, "
            f"others {share(other_cc)}",
        ]
    )


def _report(store: Any, report_path: Path) -> str:
    from controller.report import write_report

    summary = write_report(store, report_path, title="dyncc demo")
    return summary.line()


def _replay_demo(recording: Path, workdir: Path, report_path: Path) -> int:
    store, result, meta = _replay_into(recording, workdir, "dyncc_demo")
    print(replay_summary(result, meta))
    print(_report(store, report_path))
    print(f"report: {report_path}")
    return 0


def _live_demo(settings: DemoSettings, duration: float, workdir: Path, report_path: Path) -> int:
    from controller.lab.loop import LabOptions
    from controller.lab.run import run_lab

    recording = workdir / "lab-telemetry.bin.gz"
    rounds = int(duration // settings.round_seconds)
    opts = LabOptions(
        round_seconds=settings.round_seconds,
        rounds=rounds,
        lookback_buckets=8,
        min_buckets=min(4, max(rounds // 3, 1)),
        record=recording,
    )
    print(
        f"dyncc demo: live lab, {rounds} rounds of {settings.round_seconds}s (each stands in for 5 minutes)", flush=True
    )
    summary = run_lab(opts, _chdb_url(workdir, "dyncc_lab"), workdir / "lab", StopFlag(), out=sys.stdout)
    print(summary.summary_text())
    if summary.result.stopped_by or not summary.result.rounds:
        print(f"lab files: {workdir}")
        return 130 if summary.result.stopped_by else 1
    store, _result, _meta = _replay_into(recording, workdir, "dyncc_demo_report")
    print(_report(store, report_path))
    print(f"report: {report_path} (this run's telemetry on a 5-minute time base)")
    return 0
