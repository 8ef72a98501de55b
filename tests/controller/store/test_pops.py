"""A POP the store does not know (no telemetry, no published config) is an error, not success.

The store (ClickHouse 18.16 and chDB) holds telemetry for "pop-a", a published config for
"pop-b" and only a rejected config for "pop-c".  kill-switch, control --once, explain and
report on an unknown POP exit 2 with one line naming the known POPs (and publish nothing);
kill-switch --force publishes anyway; the known POPs still work.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest

from controller.rollout import records as rs
from controller.store import Store
from controller.store.outcomes import PUBLISHED, REJECTED
from controller.store.pops import known_pops, unknown_pop_message
from dyncc.cli import main as dyncc
from schemas.congestion_pb2 import CongestionConfig
from tests.support import scoring_synth as synth
from tests.support.rollout_util import make_keys

START = int(dt.datetime(2024, 3, 1, 9, 0, tzinfo=dt.UTC).timestamp())
AT = "2024-03-01T12:00:30Z"
PATTERNS = {f"198.51.{i}.0/24": synth.NORMAL for i in range(6)} | {"203.0.113.0/24": synth.STEADY_BAD}


def _config(store: Store, pop: str, status: str) -> None:
    config = CongestionConfig(pop=pop, version=1, created_at_ns=time.time_ns(), round_id="r1")
    rs.record_config(store, rs.ConfigRecord(pop, 1, status, "full", config, time.time_ns()))


@pytest.fixture
def known(store: Store) -> Store:
    synth.insert_samples(store, synth.samples_frame("pop-a", PATTERNS, START, 36))
    _config(store, "pop-b", PUBLISHED)
    _config(store, "pop-c", REJECTED)
    return store


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_message_names_the_known_pops_bounded() -> None:
    assert unknown_pop_message("lax", ["fra", "lax"]) is None
    assert unknown_pop_message("lxa", []) == (
        "unknown POP 'lxa': no telemetry and no published config; the store knows no POP yet"
    )
    many = [f"p{i:04d}" for i in range(5000)]
    text = unknown_pop_message("lxa", many, limit=20, hint="--force publishes anyway")
    assert text is not None and "\n" not in text
    assert text.startswith("unknown POP 'lxa': no telemetry and no published config; known POPs: p0000, p0001")
    assert "p0019 and 4980 more (--force publishes anyway)" in text and "p0020" not in text


def test_known_pops_are_telemetry_and_published_configs(known: Store) -> None:
    assert known_pops(known) == ["pop-a", "pop-b"]


def test_kill_switch_unknown_pop_is_exit_2_unless_forced(
    known: Store, store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    private, _ = make_keys(tmp_path)
    out = tmp_path / "cfg"
    base = ["control", "kill-switch", "--clickhouse", store_url, "--publish-dir", str(out), "--key", str(private)]

    assert dyncc([*base, "--pop", "no-such-pop"]) == 2
    line = _one_line(capsys)
    assert "unknown POP 'no-such-pop'" in line and "known POPs: pop-a, pop-b" in line and "--force" in line
    assert not (out / "no-such-pop.cfg").exists()
    assert known_pops(known) == ["pop-a", "pop-b"]  # nothing recorded for it

    assert dyncc([*base, "--pop", "pop-a"]) == 0  # known by its telemetry
    assert CongestionConfig.FromString((out / "pop-a.cfg").read_bytes()).kill_switch

    assert dyncc([*base, "--pop", "no-such-pop", "--force"]) == 0
    assert CongestionConfig.FromString((out / "no-such-pop.cfg").read_bytes()).kill_switch


def test_control_once_unknown_pop_is_exit_2(known: Store, store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["control", "--clickhouse", store_url, "--once", "--dry-run", "--at", AT]
    assert dyncc([*base, "--pop", "no-such-pop"]) == 2
    assert "unknown POP 'no-such-pop'" in _one_line(capsys)

    assert dyncc([*base, "--pop", "pop-a"]) == 0
    out = capsys.readouterr().out
    assert "pop-a\t203.0.113.0/24\ttrial" in out  # a selection starts a trial


def test_explain_unknown_pop_is_exit_2(known: Store, store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["control", "--clickhouse", store_url, "explain", "--prefix", "203.0.113.0/24", "--at", AT]
    assert dyncc([*base, "--pop", "no-such-pop"]) == 2
    assert "known POPs: pop-a, pop-b" in _one_line(capsys)

    assert dyncc([*base, "--pop", "pop-a"]) == 0
    assert "prefix 203.0.113.0/24 at POP pop-a" in capsys.readouterr().out
    # a known POP (by its published config alone) where the prefix has neither data nor a decision:
    # an unknown prefix there, one line and exit 2
    assert dyncc([*base, "--pop", "pop-b"]) == 2
    assert "unknown prefix 203.0.113.0/24 at POP pop-b" in _one_line(capsys)


def test_report_unknown_pop_is_exit_2(
    known: Store, store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "report.html"
    base = ["report", "--clickhouse", store_url, "-o", str(page)]
    assert dyncc([*base, "--pop", "no-such-pop"]) == 2
    assert "unknown POP 'no-such-pop'" in _one_line(capsys) and not page.exists()

    assert dyncc([*base, "--pop", "pop-a"]) == 0
    assert page.stat().st_size > 0
