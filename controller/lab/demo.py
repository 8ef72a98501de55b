"""`dyncc demo`: the whole loop on the embedded store (chDB), no servers, a few minutes.

As root: a `dyncc lab` run (default 3 minutes of 20-second rounds) with live
routes on the lab edge, then the HTML report built from that run's telemetry
replayed on a 5-minute time base (each 20 s round becomes one 5-minute bucket).
Without root (or with --replay): says why in one line, replays the recorded lab
telemetry committed in demo/ through the ingest writer, runs the scoring rounds
and writes the report.  Ends with a summary and the report's path.  Every option
is checked (one line, exit 2) before a directory is made or a lab is built.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from dyncc_common.errors import ConfigError
from dyncc_common.runtime import StopFlag, setup_logging
from dyncc_common.units import parse_duration

log = logging.getLogger("dyncc.demo")


def configure(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--duration", default="3m", help="live lab length (default 3m)")
    a("--round-seconds", type=int, default=20, help="one accelerated 5-minute round (default 20 s)")
    a("--replay", action="store_true", help="replay the recorded telemetry even when root")
    a("--recording", type=Path, default=None, help="telemetry to replay (default: demo/lab-telemetry.bin.gz)")
    a("--workdir", type=Path, default=None, help="where the store and report go (default: a new temp dir)")
    a("-o", "--output", type=Path, default=None, help="report path (default WORKDIR/dyncc-demo-report.html)")
    a("-v", "--verbose", action="store_true")


def check_args(args: argparse.Namespace) -> float:
    """The live lab's duration in seconds; ConfigError for any bad option (nothing is created)."""
    duration = parse_duration(args.duration, "--duration")
    if args.round_seconds < 2:
        raise ConfigError(f"bad --round-seconds {args.round_seconds}: at least 2")
    if duration < 3 * args.round_seconds:
        raise ConfigError("--duration must cover at least 3 rounds")
    if args.recording is not None and not Path(args.recording).is_file():
        raise ConfigError(f"--recording {args.recording}: no such file")
    if args.workdir is not None and Path(args.workdir).exists() and not Path(args.workdir).is_dir():
        raise ConfigError(f"bad --workdir {args.workdir}: not a directory")
    if args.output is not None:
        from controller.report.cli import check_output

        check_output(str(args.output))
    return duration


def _workdir(args: argparse.Namespace) -> Path:
    if args.workdir:
        try:
            args.workdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create --workdir {args.workdir}: {exc.strerror or exc}") from exc
        return Path(args.workdir).resolve()
    return Path(tempfile.mkdtemp(prefix="dyncc-demo-"))


def why_replay(args: argparse.Namespace) -> str:
    """'' when the live lab can run, else the one-line reason for replaying."""
    if args.replay:
        return "--replay given"
    if os.geteuid() != 0:
        return "not root: the live lab needs root for network namespaces and routes"
    from controller.lab.cli import require_lab_host

    try:
        require_lab_host()
    except ConfigError as exc:
        return str(exc)
    return ""


def run(args: argparse.Namespace) -> int:
    setup_logging(args.verbose)
    duration = check_args(args)
    workdir = _workdir(args)
    report_path = args.output or workdir / "dyncc-demo-report.html"
    reason = why_replay(args)
    if reason:
        recording = args.recording or _default_recording()
        print(f"dyncc demo: {reason}; replaying recorded lab telemetry from {recording}", flush=True)
        return _replay_demo(recording, workdir, report_path)
    return _live_demo(args, duration, workdir, report_path)


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


def _live_demo(args: argparse.Namespace, duration: float, workdir: Path, report_path: Path) -> int:
    from controller.lab.loop import LabOptions
    from controller.lab.run import run_lab

    recording = workdir / "lab-telemetry.bin.gz"
    rounds = int(duration // args.round_seconds)
    opts = LabOptions(
        round_seconds=args.round_seconds,
        rounds=rounds,
        lookback_buckets=8,
        min_buckets=min(4, max(rounds // 3, 1)),
        record=recording,
    )
    print(f"dyncc demo: live lab, {rounds} rounds of {args.round_seconds}s (each stands in for 5 minutes)", flush=True)
    summary = run_lab(opts, _chdb_url(workdir, "dyncc_lab"), workdir / "lab", StopFlag(), out=sys.stdout)
    print(summary.summary_text())
    if summary.result.stopped_by or not summary.result.rounds:
        print(f"lab files: {workdir}")
        return 130 if summary.result.stopped_by else 1
    store, _result, _meta = _replay_into(recording, workdir, "dyncc_demo_report")
    print(_report(store, report_path))
    print(f"report: {report_path} (this run's telemetry on a 5-minute time base)")
    return 0
