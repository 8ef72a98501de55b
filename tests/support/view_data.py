"""Rows with known aggregates for the views `dyncc schema apply` creates (sql/views), and the
check that each view, selected with a time filter of the caller's own, returns them.

Four 5-minute buckets B0..B3 (2026-01-01 11:55 .. 12:10); the filter keeps B1 and B2
([12:00, 12:10)), so a view that ignored it, or filtered raw rows instead of buckets, returns other
rows.  Per POP and bucket four flows (one per prefix index i), each polled twice: i = 0..2
qualify (500 KB acked), i = 3 is small.  Inside the window the treated prefixes run BBR; outside
every socket runs CUBIC and the rates differ, so leaked buckets change every aggregate.

Controller rounds (selections + round_outcomes):
  R1 11:50  published        lax: i0 select, i1 holdout      ord: i0 select, i2 holdout
  R2 12:05  published        lax: i0 keep, i1 holdout        ord: i0 keep, i1 select, i2 holdout
  R3 12:07  lax rejected (recorded first), ord published      lax: i2 select (never in force)
  R4 12:08  no outcome row (ord: i3 select): outcome 'unknown', counted nowhere else
  R5 12:15  published        lax: i3 select (after the window)
so the treated group is lax i0, ord i0, ord i1 (+ lax i3, small) and the holdout lax i1, ord i2.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import numpy as np

from controller.store import Store

POPS = ("lax", "ord")
BUCKETS = [dt.datetime(2026, 1, 1, 11, 55) + dt.timedelta(minutes=5 * k) for k in range(4)]
START, END = BUCKETS[1], BUCKETS[3]  # the caller's filter: START <= time < END
IN_WINDOW = (1, 2)  # bucket indexes inside it
FLOWS = 4
QUALIFYING = (0, 1, 2)
BBR = {"lax": (0,), "ord": (0, 1)}  # inside the window
TREATED = (("lax", 0), ("ord", 0), ("ord", 1))
HOLDOUT = (("lax", 1), ("ord", 2))
VIEWS = (
    "bbr_share_of_sockets",
    "config_versions_annotations",
    "delivery_rate_percentiles_by_pop",
    "goodput_p10_by_pop",
    "new_selections_per_round",
    "selections_with_outcome",
    "treated_vs_holdout",
)


def prefix(pop: str, i: int) -> str:
    return f"198.{51 + POPS.index(pop)}.{i}.0/24"


def rate(pop: str, k: int, i: int) -> int:
    """Delivery rate (bytes/s) of flow i of a POP in bucket k: distinct per bucket, POP and flow."""
    return (k + 1) * 1_000_000 + POPS.index(pop) * 100_000 + i * 10_000


def acked(i: int) -> int:
    return 50_000 if i not in QUALIFYING else 500_000


def busy(pop: str, k: int, i: int, poll: int) -> int:
    """busy_time (µs) at poll 0 (half acked) or 1: goodput = acked / busy is half the rate."""
    return int(acked(i) * (poll + 1) / 2 * 1e6 / (rate(pop, k, i) / 2))


def insert(store: Store) -> None:
    """The rows of the module docstring into tcpinfo, selections, round_outcomes, config_versions."""
    cols: dict[str, list[Any]] = {k: [] for k in ("time", "time_ns", "pop", "host", "prefix", "cc", "cookie")}
    nums: dict[str, list[int]] = {k: [] for k in ("bytes_acked", "delivery_rate", "busy_time")}
    cookie = 1
    for pop in POPS:
        for k, bucket in enumerate(BUCKETS):
            for i in range(FLOWS):
                on_bbr = k in IN_WINDOW and i in BBR[pop]
                for poll in (0, 1):
                    t = bucket + dt.timedelta(seconds=10 + 30 * poll)
                    cols["time"].append(np.datetime64(t, "s"))
                    cols["time_ns"].append(int(t.replace(tzinfo=dt.UTC).timestamp()) * 1_000_000_000)
                    cols["pop"].append(pop)
                    cols["host"].append(f"{pop}-edge1")
                    cols["prefix"].append(prefix(pop, i))
                    cols["cc"].append("bbr" if on_bbr else "cubic")
                    cols["cookie"].append(cookie)
                    nums["bytes_acked"].append(acked(i) * (poll + 1) // 2)
                    nums["delivery_rate"].append(rate(pop, k, i))
                    nums["busy_time"].append(busy(pop, k, i, poll))
                cookie += 1
    store.insert_columns(
        "tcpinfo",
        {
            "time": np.array(cols["time"], dtype="datetime64[s]"),
            "time_ns": np.array(cols["time_ns"], dtype=np.uint64),
            "pop": cols["pop"],
            "host": cols["host"],
            "prefix": cols["prefix"],
            "family": np.full(len(cols["pop"]), 2, dtype=np.uint8),
            "cc": cols["cc"],
            "cookie": np.array(cols["cookie"], dtype=np.uint64),
            **{name: np.array(values, dtype=np.uint64) for name, values in nums.items()},
        },
    )
    _insert_rounds(store)
    _insert_configs(store)


def _at(hour: int, minute: int, second: int = 0) -> dt.datetime:
    return dt.datetime(2026, 1, 1, hour, minute, second)


ROUNDS: list[tuple[str, dt.datetime, str, list[tuple[int, str]]]] = [
    ("R1", _at(11, 50), "lax", [(0, "select"), (1, "holdout"), (2, "skip")]),
    ("R1", _at(11, 50), "ord", [(0, "select"), (2, "holdout")]),
    ("R2", _at(12, 5), "lax", [(0, "keep"), (1, "holdout"), (2, "skip")]),
    ("R2", _at(12, 5), "ord", [(0, "keep"), (1, "select"), (2, "holdout")]),
    ("R3", _at(12, 7), "lax", [(0, "keep"), (1, "holdout"), (2, "select")]),
    ("R3", _at(12, 7), "ord", [(0, "keep"), (1, "keep"), (2, "holdout")]),
    ("R4", _at(12, 8), "ord", [(3, "select")]),
    ("R5", _at(12, 15), "lax", [(0, "keep"), (1, "holdout"), (3, "select")]),
]
#: (round, pop) -> its round_outcomes rows in recording order (the last one is the outcome)
OUTCOMES = {
    ("R1", "lax"): ["published"],
    ("R1", "ord"): ["published"],
    ("R2", "lax"): ["published"],
    ("R2", "ord"): ["recorded", "published"],
    ("R3", "lax"): ["recorded", "rejected"],
    ("R3", "ord"): ["published"],
    ("R5", "lax"): ["published"],
}


def _insert_rounds(store: Store) -> None:
    rows = [(rid, t, pop, i, d) for rid, t, pop, decisions in ROUNDS for i, d in decisions]
    store.insert_columns(
        "selections",
        {
            "round_id": [r[0] for r in rows],
            "round_time": np.array([np.datetime64(r[1], "s") for r in rows], dtype="datetime64[s]"),
            "round_time_ns": np.array([int(r[1].replace(tzinfo=dt.UTC).timestamp()) * 10**9 for r in rows], np.uint64),
            "pop": [r[2] for r in rows],
            "prefix": [prefix(r[2], r[3]) for r in rows],
            "family": np.full(len(rows), 2, dtype=np.uint8),
            "decision": [r[4] for r in rows],
            "reason": [f"{r[0]} {r[4]}" for r in rows],
        },
    )
    times = {(rid, pop): t for rid, t, pop, _ in ROUNDS}
    outcomes = [(rid, pop, n, status) for (rid, pop), steps in OUTCOMES.items() for n, status in enumerate(steps)]
    store.insert_columns(
        "round_outcomes",
        {
            "round_id": [o[0] for o in outcomes],
            "round_time": np.array([np.datetime64(times[(o[0], o[1])], "s") for o in outcomes], "datetime64[s]"),
            "pop": [o[1] for o in outcomes],
            "recorded_ns": np.array([1 + o[2] for o in outcomes], dtype=np.uint64),
            "status": [o[3] for o in outcomes],
        },
    )


#: (created_at, pop, version, status, entries, kill_switch): two rows of lax v2 (canary, then full)
CONFIGS = [
    (_at(11, 50, 30), "lax", 1, "published", 1, 0),
    (_at(12, 5, 30), "lax", 2, "published", 2, 0),
    (_at(12, 6, 30), "lax", 2, "published", 3, 0),
    (_at(12, 6), "ord", 1, "rejected", 9, 0),
    (_at(12, 7, 30), "ord", 2, "published", 0, 1),
    (_at(12, 15, 30), "lax", 3, "published", 2, 0),
]


def _insert_configs(store: Store) -> None:
    store.insert_columns(
        "config_versions",
        {
            "created_at": np.array([np.datetime64(c[0], "s") for c in CONFIGS], dtype="datetime64[s]"),
            "pop": [c[1] for c in CONFIGS],
            "version": np.array([c[2] for c in CONFIGS], dtype=np.uint64),
            "status": [c[3] for c in CONFIGS],
            "entries": np.array([c[4] for c in CONFIGS], dtype=np.uint32),
            "kill_switch": np.array([c[5] for c in CONFIGS], dtype=np.uint8),
        },
    )


# ---- what each view returns for the window


def unix_seconds(when: dt.datetime) -> int:
    return int(when.replace(tzinfo=dt.UTC).timestamp())


def _quantiles(values: Sequence[float], levels: tuple[float, ...]) -> list[float]:
    """ClickHouse's quantiles of a few values (every value kept): numpy's linear interpolation."""
    return [float(q) for q in np.quantile(np.array(values, dtype=float), levels)]


def expected() -> dict[str, list[tuple[Any, ...]]]:
    """Per view, its rows in the window as rows() returns them (time as Unix seconds), sorted."""
    out: dict[str, list[tuple[Any, ...]]] = {name: [] for name in VIEWS}
    for k in IN_WINDOW:
        t = unix_seconds(BUCKETS[k])
        for pop in POPS:
            out["bbr_share_of_sockets"].append((t, pop, len(BBR[pop]) / FLOWS))
            rates = [rate(pop, k, i) for i in QUALIFYING for _ in (0, 1)]  # both polls qualify
            out["delivery_rate_percentiles_by_pop"].append((t, pop, *_quantiles(rates, (0.05, 0.1, 0.5))))
            goodputs = [acked(i) * 1e6 / busy(pop, k, i, 1) for i in QUALIFYING]  # at the last poll
            out["goodput_p10_by_pop"].append((t, pop, *_quantiles(goodputs, (0.1,))))
        for grp, members in (("treated", TREATED), ("holdout", HOLDOUT)):
            rates = [rate(pop, k, i) for pop, i in members for _ in (0, 1)]
            out["treated_vs_holdout"].append((t, grp, *_quantiles(rates, (0.1,))))
    out["new_selections_per_round"] = [
        (unix_seconds(_at(12, 5)), "lax", 0),
        (unix_seconds(_at(12, 5)), "ord", 1),
        (unix_seconds(_at(12, 7)), "ord", 0),
    ]
    for rid, when, pop, decisions in ROUNDS:
        if START <= when < END:
            outcome = OUTCOMES.get((rid, pop), ["unknown"])[-1]
            for i, decision in decisions:
                out["selections_with_outcome"].append(
                    (unix_seconds(when), pop, prefix(pop, i), decision, outcome, f"{rid} {decision}")
                )
    out["config_versions_annotations"] = [
        (unix_seconds(_at(12, 5, 30)), "lax v2: 3 prefixes", "lax"),
        (unix_seconds(_at(12, 7, 30)), "ord v2: 0 prefixes (KILL SWITCH)", "ord"),
    ]
    return {name: sorted(found, key=_key) for name, found in out.items()}


#: the columns of each view a query reads after its time
COLUMNS = {
    "bbr_share_of_sockets": ["pop", "bbr_share"],
    "config_versions_annotations": ["text", "tags"],
    "delivery_rate_percentiles_by_pop": ["pop", "p5", "p10", "p50"],
    "goodput_p10_by_pop": ["pop", "p10_goodput"],
    "new_selections_per_round": ["pop", "new_selected"],
    "selections_with_outcome": ["pop", "prefix", "decision", "outcome", "reason"],
    "treated_vs_holdout": ["grp", "p10"],
}


def query(name: str) -> str:
    """The view's rows with the caller's own time filter (and the setting that pushes it into the
    view on ClickHouse 18.16; later servers and chDB do so by default)."""
    return (
        f"SELECT toUInt32(time), {', '.join(COLUMNS[name])} FROM {name} "
        "WHERE time >= %(start)s AND time < %(end)s SETTINGS enable_optimize_predicate_expression = 1"
    )


def rows(store: Store, name: str, sql: str | None = None) -> list[tuple[Any, ...]]:
    """The rows of a query of the view (query(name) unless `sql`), texts decoded, sorted."""
    got = []
    for row in store.query_rows(sql or query(name), {"start": START, "end": END}):
        values: list[Any] = []
        for value in row:
            if isinstance(value, bytes):
                value = value.decode()
            elif not isinstance(value, (str, float)):
                value = int(value)
            values.append(value)
        got.append(tuple(values))
    return sorted(got, key=_key)


def _key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(v for v in row if not isinstance(v, float))


def assert_rows(name: str, got: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> None:
    """Equal rows: exact but for floats (relative 1e-9)."""
    assert [_key(r) for r in got] == [_key(r) for r in want], name
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g, w, strict=True):
            if isinstance(b, float):
                assert isinstance(a, float) and abs(a - b) <= 1e-9 * max(1.0, abs(b)), (name, g, w)


def check_all(store: Store) -> None:
    """Every view, selected with the window as its filter, returns expected()'s rows."""
    want = expected()
    assert set(want) == set(COLUMNS)
    for name in VIEWS:
        got = rows(store, name)
        assert got, f"{name}: no rows in the window"
        assert_rows(name, got, want[name])


def view_query(name: str, start: dt.datetime, end: dt.datetime) -> str:
    """Every row of the view `name` (sql/views/NAME.sql, created by `dyncc schema apply`) whose
    time is in [start, end], as Grafana's `$__timeFilter(time)` selects them, ordered by time."""
    from controller.report.data import render_view
    from controller.store.sql import select_view

    return render_view(select_view(name), start, end)
