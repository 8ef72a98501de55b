"""`dyncc control rollout status|advance --pop POP` for a POP the store knows nothing of: exit 2 and
one line naming the known POPs (it printed "IDLE stable v0" for a typo, exit 0)."""

from __future__ import annotations

import pytest

from controller.store import Store
from dyncc.cli import main as dyncc_main
from tests.support import scoring_synth as synth

START = 1_709_283_600  # 2024-03-01 09:00 UTC


def test_status_of_an_unknown_pop_exits_2_with_one_line(
    store: Store, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    synth.insert_samples(store, synth.samples_frame("lax", {"198.51.100.0/24": synth.NORMAL}, START, 2))
    status = ["control", "rollout", "status", "--clickhouse", store_url]
    assert dyncc_main([*status, "--pop", "laxx"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.strip().splitlines()
    assert "unknown POP 'laxx'" in line and "known POPs: lax" in line and "no rollout and no host report" in line
    assert dyncc_main([*status, "--pop", "lax"]) == 0  # telemetry only: a known POP, idle
    assert "POP lax: IDLE  stable v0" in capsys.readouterr().out
    assert dyncc_main([*status, "--pop", "lax", "--pop", "nowhere"]) == 2  # every --pop is checked
    assert "unknown POP 'nowhere'" in capsys.readouterr().err
