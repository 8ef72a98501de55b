"""`dyncc collect --once` as a program: everything acknowledged before the fast exit, failures in the exit code."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from collector.telemetry.start import process_is_dyncc
from schemas.tcpinfo_decode import decode_batch
from tests.support.kafka import consume

REPO = Path(__file__).resolve().parents[3]


def _collect(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "dyncc.cli",
            "collect",
            "--once",
            "--no-default-excludes",
            "--host",
            "t-once",
            *args,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_not_the_dyncc_process_here() -> None:
    """In-process callers (tests, other programs) never get the _exit."""
    assert not process_is_dyncc()


@pytest.mark.kafka
def test_once_delivers_every_batch_before_exit(kafka_brokers: str, kafka_topic: str) -> None:
    # some sockets of our own, so the poll has rows
    lst = socket.create_server(("127.0.0.1", 0))
    conns = [socket.create_connection(lst.getsockname()) for _ in range(20)]
    try:
        proc = _collect("--sink", "kafka", "--brokers", kafka_brokers, "--topic", kafka_topic, "--max-rows", "8")
    finally:
        for c in conns:
            c.close()
        lst.close()
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"poll 1: .* exported=(\d+) .* batches=(\d+)", proc.stderr)
    assert m, proc.stderr
    rows, batches = int(m.group(1)), int(m.group(2))
    assert rows >= 40 and batches >= 5
    got = [decode_batch(b) for b in consume(kafka_brokers, kafka_topic, batches)]
    assert sorted(b.sequence for b in got) == list(range(batches))  # all there, none twice
    assert sum(b.row_count for b in got) == rows
    assert got[0].host == "t-once"


@pytest.mark.kafka
def test_once_exit_code_reports_undelivered_batches() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _collect("--sink", "kafka", "--brokers", f"127.0.0.1:{port}", "--flush-timeout", "2s", "--topic", "t")
    assert proc.returncode == 1, proc.stderr
    assert re.search(r"ERROR dyncc.collect: \d+ batches were not delivered", proc.stderr), proc.stderr


def test_once_config_error_still_exits_2_with_one_line(tmp_path: Path) -> None:
    """A bad setting found after the dump helper started: one line, exit 2, no helper left behind."""
    proc = _collect("--sink", "file")  # --out missing
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["dyncc collect: --sink file needs --out PATH"]


def _moments(stderr: str) -> dict[str, float]:
    """The run's timeline line (-v) as {moment: ms after the first mark}."""
    m = re.search(r"DEBUG dyncc.collect: timeline: (.*)", stderr)
    assert m, stderr
    return {k: float(v) for k, v in re.findall(r"(\w+)=\+([\d.]+)(?= |$)", m.group(1))}


@pytest.mark.kafka
def test_once_kafka_producer_is_created_before_numpy_loads(kafka_brokers: str, kafka_topic: str) -> None:
    """The producer connects while the rest loads: its moment comes before the imports end."""
    proc = _collect("--sink", "kafka", "--brokers", kafka_brokers, "--topic", kafka_topic, "-v")
    assert proc.returncode == 0, proc.stderr
    t = _moments(proc.stderr)
    assert t["forked"] <= t["producer"] <= t["imported"] <= t["sink"] <= t["polled"] <= t["closed"], t
    assert "first_ack" in t


def test_once_file_timeline_has_no_producer(tmp_path: Path) -> None:
    proc = _collect("--sink", "file", "--out", str(tmp_path / "b.bin"), "-v")
    assert proc.returncode == 0, proc.stderr
    t = _moments(proc.stderr)
    assert "producer" not in t
    assert t["forked"] <= t["imported"] <= t["sink"] <= t["polled"] <= t["closed"], t


@pytest.mark.kafka
def test_once_early_producer_unreachable_broker_names_the_reason() -> None:
    """A producer made before the sink still reports why delivery failed, in the one error line."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _collect("--sink", "kafka", "--brokers", f"127.0.0.1:{port}", "--flush-timeout", "2s", "--topic", "t")
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, proc.stderr
    assert f"(Kafka 127.0.0.1:{port}: " in errors[0] and "Connection refused" in errors[0], errors


def test_once_bad_kafka_setting_exits_2_with_one_line(tmp_path: Path) -> None:
    """The early producer's creation error is the same one line and exit 2 as before."""
    config = tmp_path / "collect.toml"
    config.write_text('[kafka]\n"no.such.setting" = "x"\n')
    proc = _collect("--config", str(config), "--sink", "kafka", "--brokers", "127.0.0.1:9", "--topic", "t")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dyncc collect: bad Kafka settings: "), lines
    assert "no.such.setting" in lines[0]
