"""`dyncc control`: --once, --dry-run, explain, the aligned scheduler, metrics, SIGTERM."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from controller.control import cli as control_cli
from controller.control import loop as control_loop
from controller.control.settings import ControlSettings
from controller.store import open_store
from controller.store.migrate import apply_migrations
from dyncc.cli import main as dyncc_main
from dyncc_common.runtime import StopFlag
from tests.support import scoring_synth as synth

AT = "2024-03-01T12:00:30Z"
START = int(dt.datetime(2024, 3, 1, 9, 0, tzinfo=dt.UTC).timestamp())
PATTERNS = {f"198.51.{i}.0/24": synth.NORMAL for i in range(20)} | {"203.0.113.0/24": synth.STEADY_BAD}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dyncc control")
    control_cli.configure(parser)
    return parser.parse_args(argv)


def test_next_boundary_is_aligned() -> None:
    now = dt.datetime(2024, 3, 1, 12, 3, 10, tzinfo=dt.UTC)
    assert control_cli.next_boundary(now, 300, 30) == dt.datetime(2024, 3, 1, 12, 5, 30, tzinfo=dt.UTC)
    assert control_cli.next_boundary(now, 20, 0) == dt.datetime(2024, 3, 1, 12, 3, 20, tzinfo=dt.UTC)
    # just after a boundary but before its delay: that same boundary's round is still ahead
    early = dt.datetime(2024, 3, 1, 12, 5, 10, tzinfo=dt.UTC)
    assert control_cli.next_boundary(early, 300, 30) == dt.datetime(2024, 3, 1, 12, 5, 30, tzinfo=dt.UTC)


def test_bad_config_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert dyncc_main(["control", "--clickhouse", "chdb:///nonexistent", "--lookback", "7m", "--once"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "dyncc control: lookback 420 s is not a whole number of 300 s buckets"


def test_once_dry_run_and_explain(chdb_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    store = open_store(chdb_url)
    apply_migrations(store)
    synth.insert_samples(store, synth.samples_frame("pop1", PATTERNS, START, 36))

    assert control_cli.run(parse(["--clickhouse", chdb_url, "--once", "--dry-run", "--at", AT])) == 0
    out = capsys.readouterr().out
    assert out.strip().split("\t")[:3] == ["pop1", "203.0.113.0/24", "trial"]  # a selection starts a trial
    assert "trial starts, first block" in out
    assert store.query_rows("SELECT count() FROM selections")[0][0] == 0

    assert control_cli.run(parse(["--clickhouse", chdb_url, "--once", "--at", AT])) == 0
    rows = store.query_rows("SELECT decision, count() FROM selections GROUP BY decision ORDER BY decision")
    assert [(str(d), int(n)) for d, n in rows] == [("skip", 20), ("trial", 1)]

    args = parse(
        [
            "--clickhouse",
            chdb_url,
            "explain",
            "--pop",
            "pop1",
            "--prefix",
            "203.0.113.0/24",
            "--at",
            "2024-03-01T12:05:30Z",
        ]
    )
    assert control_cli.run(args) == 0
    text = capsys.readouterr().out
    assert text.count(" BAD") == 35  # 35 buckets with data in the shifted window, all bad
    assert "duty cycle 1.00" in text
    assert "decision now (dry run): trial -> " in text
    assert ": trial: 0 of at most 96 blocks realized in pairs: effect n/a" in text
    assert "last recorded decision: trial" in text
    assert "trials (90% intervals" in text and ", running: p10 delivery rate n/a" in text


def test_scheduler_rounds_and_stop(chdb_url: str) -> None:
    store = open_store(chdb_url)
    apply_migrations(store)
    now = int(time.time())
    synth.insert_samples(store, synth.samples_frame("lab", PATTERNS, now - 40, 50, bucket_seconds=1))
    args = parse(["--clickhouse", chdb_url, "--bucket", "1s", "--lookback", "36s", "--min-hold", "1h"])
    metrics = control_loop.Metrics()
    controller = control_loop.Controller(store, ControlSettings.from_sources(vars(args)), metrics)
    stop = StopFlag()

    def rounds_ok() -> float:
        return metrics.registry.get_sample_value("dyncc_control_rounds_total", {"result": "ok"}) or 0.0

    def stop_after_two_rounds() -> None:
        # a round of chDB can outlast the 1 s interval on a loaded machine: wait for the rounds, not a clock
        deadline = time.monotonic() + 60
        while rounds_ok() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        stopped_at.append(time.monotonic())
        stop.set()

    stopped_at: list[float] = []
    threading.Thread(target=stop_after_two_rounds, daemon=True).start()
    assert control_cli.schedule(controller, every=1.0, delay=0.1, stop=stop) == 0
    assert stopped_at and time.monotonic() - stopped_at[0] < 15  # stops after at most the round in flight
    assert rounds_ok() >= 2
    rows = store.query_rows(
        "SELECT round_id, decision FROM selections WHERE prefix = '203.0.113.0/24' ORDER BY round_time_ns"
    )
    assert len({r[0] for r in rows}) == len(rows) >= 2
    assert [str(r[1]) for r in rows[:2]] == ["trial", "trial"]  # a selection starts a trial, which goes on
    assert metrics.registry.get_sample_value("dyncc_control_trials", {"pop": "lab"}) == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_daemon_metrics_and_sigterm(tmp_path: Path) -> None:
    url = f"chdb://{tmp_path / 'chdb'}?database=ctl&ttl=off"
    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    repo = Path(__file__).resolve().parents[3]
    cmd = [sys.executable, "-m", "dyncc.cli"]
    missing = subprocess.run(
        [*cmd, "control", "--clickhouse", url, "--once"], capture_output=True, text=True, env=env, cwd=repo, timeout=60
    )
    assert missing.returncode == 2
    assert "run 'dyncc schema apply' first" in missing.stderr
    subprocess.run(
        [*cmd, "schema", "apply", "--clickhouse", url], check=True, capture_output=True, env=env, cwd=repo, timeout=60
    )
    proc = subprocess.Popen(
        [
            *cmd,
            "control",
            "--clickhouse",
            url,
            "--bucket",
            "2s",
            "--lookback",
            "72s",
            "--every",
            "1s",
            "--delay",
            "0.1s",
            "--metrics-port",
            str(port),
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=repo,
    )
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "dyncc.control: round " in line:
                break
        assert any("dyncc.control: round " in ln for ln in lines), "".join(lines)
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert 'dyncc_control_rounds_total{result="ok"}' in body
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=20)[1]
        assert proc.returncode == 0
        assert "stopping (SIGTERM)" in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
