"""`dyncc demo`: the whole loop on the embedded store (chDB), no servers, a few minutes.

As root: a `dyncc lab` run (15-second rounds: 2 POPs x 2 edge hosts, 128 client prefixes in
five path classes, nginx and HTTP clients, staged rollout, per-prefix trials) with live routes on
the lab's edge hosts, then the HTML report written from that run's own store (its telemetry,
access logs, decisions and trials on the lab's bucket: no replay, no re-scoring), then the
per-class summary, whose effect lines are the report's headline.  Without root (or without
nginx/clang, or with --replay): says why in one line, replays the recorded lab committed in
demo/ (telemetry and access logs) through the ingest writer and the access-log loader, runs the
controller's rounds on a 5-minute time base, and writes the report and the per-class summary,
both from that one store.  Either way it ends with dyncc/lab/closing.py's lines, printed after
the teardown, the report and a flush of the log (stderr), so no log line follows them: the
summary (rollbacks included), the report's path, and the store's URL (`chdb://DIR?database=DB`)
with the `dyncc control explain`, `dyncc report` and SQL commands that open it.  Every option
is checked (one line, exit 2) before a directory is made or a lab is built: the flags come from DemoSettings
(dyncc/lab/settings.py); dyncc/cli.py calls run(settings).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.evidence.settings import EvidenceSettings
from dyncc.lab.settings import DemoSettings
from dyncc_common.errors import ConfigError
from dyncc_common.runtime import StopFlag, setup_logging

if TYPE_CHECKING:
    from controller.store import Store
    from dyncc.lab.run import LabSummary

log = logging.getLogger("dyncc.demo")


SETTINGS = DemoSettings

MIN_ROUNDS = 8  # selection after 3 buckets, the staged rollout, then some rounds on BBR


def check_args(settings: DemoSettings) -> float:
    """The live lab's duration in seconds; ConfigError for any bad option (nothing is created)."""
    duration = settings.duration
    if settings.round_seconds < 5:
        raise ConfigError(f"bad --round-seconds {settings.round_seconds}: at least 5")
    if duration < MIN_ROUNDS * settings.round_seconds:
        raise ConfigError(f"--duration must cover at least {MIN_ROUNDS} rounds")
    try:  # a path under a directory this user may not search raises (EACCES), not False
        if settings.recording is not None and not Path(settings.recording).is_file():
            raise ConfigError(f"--recording {settings.recording}: no such file")
    except OSError as exc:
        raise ConfigError(f"cannot read --recording {settings.recording}: {exc.strerror or exc}") from exc
    try:
        if settings.workdir is not None and Path(settings.workdir).exists() and not Path(settings.workdir).is_dir():
            raise ConfigError(f"bad --workdir {settings.workdir}: not a directory")
    except OSError as exc:
        raise ConfigError(f"cannot use --workdir {settings.workdir}: {exc.strerror or exc}") from exc
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
    from dyncc.lab.cli import require_lab_host

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
    from dyncc.lab.replay import DEFAULT_RECORDING

    return DEFAULT_RECORDING


def _chdb_url(workdir: Path, database: str) -> str:
    return f"chdb://{workdir / 'chdb'}?database={database}"


@dataclass
class Replayed:
    store: Any
    result: Any
    meta: dict[str, Any]
    record: Any  # dyncc.lab.run.RunRecord
    evidence: EvidenceSettings  # the replay's rounds' (open loop): the summary and the report use them too


def _replay_into(recording: Path, workdir: Path, database: str) -> Replayed:
    """Replay `recording` (and its access logs) into a fresh database, 5-minute buckets."""
    from dyncc.lab.control import LabControl
    from dyncc.lab.model import LabScoring
    from dyncc.lab.outcomes import RoundView
    from dyncc.lab.replay import REAL_BUCKET, recorded_access_logs, replay
    from dyncc.lab.run import RunRecord, open_lab_store
    from dyncc.lab.telemetry import RecordingError, read_recording

    try:
        records, meta = read_recording(recording)
        logs = recorded_access_logs(recording)
    except (RecordingError, OSError, EOFError) as exc:
        raise ConfigError(str(exc)) from exc
    if not records:
        raise ConfigError(f"recording {recording} holds no telemetry")
    try:
        s = dict(meta["scoring"])
        lab_scoring = LabScoring(
            lookback_buckets=int(s["lookback_buckets"]),
            min_buckets=int(s["min_buckets"]),
            threshold_quantile=float(s["threshold_quantile"]),
            holdout_fraction=float(s["holdout_fraction"]),
            min_hold_buckets=int(s["min_hold_buckets"]),
            max_new=int(s["max_new"]),
            min_samples=int(s["min_samples"]),
        )
        scoring = lab_scoring.scoring_settings(REAL_BUCKET)
        hosts = {str(pop): [str(h) for h in hs] for pop, hs in dict(meta["pops"]).items()}
        prefixes = {str(p): (str(v[0]), str(v[1])) for p, v in dict(meta["prefixes"]).items()}
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        why = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ConfigError(f"recording {recording}: bad metadata ({why}); a fleet-lab recording is needed") from exc
    store = open_lab_store(_chdb_url(workdir, database))
    evidence = lab_scoring.evidence_settings(open_loop=True)
    control = LabControl(
        store, scoring=scoring, workdir=workdir / database, hosts=hosts, staged=False, evidence=evidence
    )  # fmt: skip
    result = replay(store, records, meta, control, access_logs=logs, workdir=workdir / database)
    ends = result.dilation.boundaries()
    record = RunRecord(
        classes={p: v[1] for p, v in prefixes.items()},
        pops={p: v[0] for p, v in prefixes.items()},
        hosts=hosts,
        rounds=[RoundView(k + 1, ends[k], outcome) for k, outcome in enumerate(result.rounds)],
        new_sockets=[result.new_sockets.get(k, {}) for k in range(len(result.rounds))],
        bucket_s=REAL_BUCKET,
        scoring=scoring,
    )
    return Replayed(store, result, meta, record, evidence)


def _asn_file(workdir: Path, meta: dict[str, Any]) -> Path:
    from dyncc.lab.topology import write_asn_file

    path = workdir / "lab-asn.csv"
    write_asn_file(path, [(str(p), str(v[1])) for p, v in sorted(dict(meta["prefixes"]).items())])
    return path


def finish(
    summary: LabSummary,
    store: Store,
    url: str,
    report_path: Path,
    asn_file: Path,
    note: str = "",
    evidence: EvidenceSettings | None = None,
) -> int:
    """The demo's end, live or replayed: write the report from `store` (the run's own), close it,
    then print the closing lines (dyncc/lab/closing.py: the summary, the report, the store URL and
    the commands that open it) after flushing the log, so they are the last lines."""
    from controller.report import write_report
    from dyncc.lab.closing import closing_lines, print_closing

    written = write_report(store, report_path, title="dyncc demo", asn_file=asn_file, evidence=evidence)
    store.close()
    print_closing(closing_lines(summary, written.line(), report_path, url, note))
    return 0


def _replay_demo(recording: Path, workdir: Path, report_path: Path) -> int:
    from dyncc.lab.run import summarize_run

    replayed = _replay_into(recording, workdir, "dyncc_demo")
    r = replayed.result
    headline = (
        f"replayed {r.batches} telemetry batches ({r.rows} socket samples) and {r.requests} HTTP requests "
        f"of {len(replayed.record.hosts)} POPs as {r.dilation.buckets} five-minute rounds "
        "(replay: no edge routes are touched; staged rollout needs live agents, so configs go POP-wide)"
    )
    # the replay's rounds cannot make the recorded edges run what they ask: open-loop evidence
    evidence = replayed.evidence
    summary = summarize_run(replayed.record, headline, replayed.store, evidence)
    asn = _asn_file(workdir, replayed.meta)
    return finish(summary, replayed.store, _chdb_url(workdir, "dyncc_demo"), report_path, asn, evidence=evidence)


def _live_demo(settings: DemoSettings, duration: float, workdir: Path, report_path: Path) -> int:
    from dyncc.lab.closing import print_closing
    from dyncc.lab.loop import LabOptions
    from dyncc.lab.run import run_lab

    recording = workdir / "lab-telemetry.bin.gz"
    rounds = int(duration // settings.round_seconds)
    opts = LabOptions(round_seconds=settings.round_seconds, rounds=rounds, record=recording)
    print(
        f"dyncc demo: live fleet lab, {rounds} rounds of {settings.round_seconds}s (each stands in for 5 minutes)",
        flush=True,
    )
    url = _chdb_url(workdir, "dyncc_lab")
    summary = run_lab(opts, url, workdir / "lab", StopFlag(), out=sys.stdout)
    result = summary.result
    if result is None or result.stopped_by or not result.rounds:
        print_closing(["", summary.summary_text(), f"lab files: {workdir}"])
        return 130 if result is not None and result.stopped_by else 1
    from controller.store import open_store
    from dyncc.lab.topology import write_asn_file

    asn = workdir / "lab-asn.csv"
    write_asn_file(asn, sorted(result.topology.classes().items()))
    # the live run's own store and decisions: no replay, no re-scoring
    note = "(the live run's own telemetry, decisions and trials)"
    return finish(summary, open_store(url), url, report_path, asn, note)
