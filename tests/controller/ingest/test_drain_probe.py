"""`dyncc ingest --kafka DEAD --drain` says the broker is unreachable within seconds (it took the
daemon's 30 s --connect-timeout); a long-running loader keeps its start wait and rides out later
outages (tests/controller/ingest/test_kafka_outages.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller.ingest.kafka import DRAIN_PROBE_SECONDS, KafkaConfig, start_probe, wait_for_brokers
from controller.ingest.settings import IngestSettings
from dyncc_common.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]


def test_the_start_probe_of_a_drain_run_is_short() -> None:
    assert start_probe(30.0, drain=False) == (30.0, "--connect-timeout")
    assert start_probe(0.0, drain=False) == (0.0, "--connect-timeout")
    assert start_probe(30.0, drain=True) == (DRAIN_PROBE_SECONDS, "--drain: at most 5s")
    assert start_probe(3.0, drain=True) == (3.0, "--connect-timeout")  # shorter: as given
    assert start_probe(0.0, drain=True) == (0.0, "--connect-timeout")  # 0: no probe, as given


def test_the_probe_of_a_drain_run_gives_up_after_5_seconds() -> None:
    settings = IngestSettings.from_sources({"clickhouse": "chdb:///nowhere", "kafka": "127.0.0.1:1", "drain": True})
    cfg = KafkaConfig.from_settings(settings)
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"within 5s \(--drain: at most 5s\)"):
        wait_for_brokers(cfg)
    assert time.monotonic() - started < DRAIN_PROBE_SECONDS + 2  # was 30 s


def test_drain_to_a_dead_broker_is_one_line_within_seconds(tmp_path: Path) -> None:
    argv = [
        "ingest",
        "--clickhouse",
        f"chdb://{tmp_path / 'store'}",
        "--kafka",
        "127.0.0.1:1",
        "--drain",
        "--metrics-port",
        "0",
    ]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "dyncc.cli", *argv, "--metrics-port", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    took = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "cannot reach Kafka broker 127.0.0.1:1 within 5s (--drain: at most 5s)" in line
    assert took < 20, took  # was 30.3 s; the probe's own time is tested above (start-up on a busy machine)
    assert not (tmp_path / "store").exists()  # refused before the store was opened
