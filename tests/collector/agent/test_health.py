"""Health counter parsing and the agent's persisted state."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.agent.health import parse_loadavg, parse_meminfo_available, parse_sockstat_tcp, read_health
from collector.agent.state import AgentState, StateError
from schemas.congestion_pb2 import CongestionConfig


def test_parsers() -> None:
    assert parse_meminfo_available("MemTotal: 100 kB\nMemAvailable:   2048 kB\n") == 2048 * 1024
    assert parse_meminfo_available("garbage") == 0
    assert parse_loadavg("0.52 0.31 0.20 1/300 42") == (0.52, 0.31)
    assert parse_loadavg("") == (0.0, 0.0)
    assert parse_sockstat_tcp("sockets: used 63\nTCP: inuse 24 orphan 0 tw 108 alloc 30 mem 312\n") == 24
    assert parse_sockstat_tcp("TCP6: inuse 6\n") == 6
    assert parse_sockstat_tcp("TCP: inuse x\n") == 0


def test_read_health_here() -> None:
    health = read_health(None, 7)
    assert health.mem_available_bytes > 0 and health.owned_routes == 7
    assert "cubic" in health.available_congestion_controls


def test_state_round_trip_and_corruption(tmp_path: Path) -> None:
    state = AgentState(tmp_path / "s", "lax").load()
    assert (state.version, state.config) == (0, None)
    config = CongestionConfig(pop="lax", version=12, signature=b"sig")
    state.save(config)
    again = AgentState(tmp_path / "s", "lax").load()
    assert (again.version, again.signature) == (12, b"sig")
    with pytest.raises(StateError, match="POP"):
        AgentState(tmp_path / "s", "fra").load()
    (tmp_path / "s" / "config.pb").write_bytes(b"\xff\xff\xff")
    with pytest.raises(StateError, match="unreadable"):
        AgentState(tmp_path / "s", "lax").load()
