"""The store's named queries on both back ends: table_exists, and the rollout p10 window whose
prefix filter travels as a data table (the statement does not grow with the prefixes)."""

from __future__ import annotations

import numpy as np
import pytest

from controller.rollout.records import p10_window, rollbacks, save_state
from controller.rollout.state import CANARY, IDLE, RolloutState
from controller.store import Store, StoreError

T0 = 1_767_225_600  # 2026-01-01 00:00:00 UTC


def test_table_exists(store: Store) -> None:
    assert store.table_exists("selections")
    assert not store.table_exists("no_such_table")
    with pytest.raises(StoreError):
        store.table_exists("selections; DROP TABLE selections")


def _prefixes(n: int) -> list[str]:
    return [f"2001:db8:{i >> 8:x}:{i & 0xFF:x}00::/56" for i in range(n)]


def test_p10_window_filters_by_prefixes_sent_as_data(store: Store) -> None:
    wanted = _prefixes(3)
    rows = 40
    times = np.arange(rows, dtype=np.uint64) + T0
    store.insert_columns(
        "tcpinfo",
        {
            "time": times.astype(np.uint32),
            "time_ns": times * 10**9,
            "pop": ["p1"] * rows,
            "host": ["h1"] * rows,
            "prefix": [wanted[i % 3] if i < 30 else "192.0.2.0/24" for i in range(rows)],
            "bytes_acked": np.full(rows, 200_000, dtype=np.uint64),
            "delivery_rate": np.arange(rows, dtype=np.uint64) * 1000 + 1000,
        },
    )
    start, end = T0 * 10**9, (T0 + rows) * 10**9
    assert p10_window(store, "p1", ["h1"], start, end).samples == rows
    assert p10_window(store, "p1", ["h1"], start, end, wanted[:1]).samples == 10
    assert p10_window(store, "p1", ["h1"], start, end, wanted).samples == 30
    assert p10_window(store, "p1", ["h1"], start, end, []).samples == 0
    # 20000 prefixes: ~600 KB as SQL text, over ClickHouse's 256 KiB max_query_size
    many = p10_window(store, "p1", ["h1"], start, end, [*_prefixes(20_000), "192.0.2.0/24"])
    assert many.samples == rows


def test_rollbacks_reads_the_rollback_rows_of_a_window(store: Store) -> None:
    def at(s: int) -> int:
        return (T0 + s) * 10**9

    save_state(store, RolloutState("lax", CANARY, "canary", candidate_version=3, wave_version=3, updated_ns=at(10)))
    reason = "canary wave v3 regressed: p10 -62%"
    save_state(
        store,
        RolloutState(
            "lax",
            IDLE,
            "rollback",
            stable_version=4,
            candidate_version=3,
            wave_version=4,
            reason=reason,
            updated_ns=at(20),
        ),
    )
    save_state(store, RolloutState("ord", IDLE, "rollback_rejected", candidate_version=7, updated_ns=at(30)))
    save_state(store, RolloutState("ord", IDLE, "rollback", candidate_version=9, updated_ns=at(90)))  # after the window
    got = rollbacks(store, at(0), at(60))
    assert [(r.pop, r.event, r.candidate_version, r.wave_version, r.updated_ns) for r in got] == [
        ("lax", "rollback", 3, 4, at(20)),
        ("ord", "rollback_rejected", 7, 0, at(30)),
    ]
    assert got[0].reason == reason and got[0].stable_version == 4
    assert rollbacks(store, at(21), at(29)) == []
