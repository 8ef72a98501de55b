"""A synthetic dyncc dataset with known shape, for the report and view tests.

Two POPs, `HOURS` hours of raw tcpinfo polls (one socket per prefix per
minute, each polled twice), a config version at `T_SELECT` that moves the
treated slow prefixes to BBR (their delivery rate steps up), one holdout
prefix per POP that stays slow, selections rounds every 15 minutes, and one
rejected config version that must not be drawn.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controller.store import Store

HOURS = 3
# Recent times: the tables have TTLs (30 days raw) that would drop old synthetic rows on chDB.
T0 = dt.datetime.now(dt.UTC).replace(tzinfo=None, minute=0, second=0, microsecond=0) - dt.timedelta(hours=HOURS + 2)
T_SELECT = T0 + dt.timedelta(hours=1, minutes=30)
POPS = ("lax", "ord")
PREFIXES_PER_POP = 8
SLOW = (0, 1, 2)  # consistently slow prefixes (index within the POP)
TREATED = (0, 1)  # selected for BBR at T_SELECT
HOLDOUT = (2,)  # slow, kept on CUBIC as the control group
LATE_SELECT = 3  # lax only: selected one round later (a second "new" bar)
SMALL_EVERY = 4  # every 4th minute the flow is small (< 100 KB): not qualifying


def prefix_of(pop_index: int, i: int) -> str:
    if i == PREFIXES_PER_POP - 1:
        return f"2001:db8:{pop_index}{i:02x}::/56"
    return f"198.{51 + pop_index}.{i}.0/24"


@dataclass
class Synth:
    buckets: int  # 5-minute buckets with qualifying data per POP
    tcpinfo_rows: int
    rounds: list[dt.datetime] = field(default_factory=list)
    new_per_round: dict[tuple[str, dt.datetime], int] = field(default_factory=dict)
    published: dict[str, list[dt.datetime]] = field(default_factory=dict)


def rate_for(i: int, minute_time: dt.datetime) -> float:
    """Delivery rate (bytes/s) of prefix i at a time: slow ones ~1 MB/s, treated ones 3 MB/s after."""
    if i in SLOW:
        return 3_000_000.0 if i in TREATED and minute_time >= T_SELECT else 1_000_000.0
    return 10_000_000.0 + 100_000.0 * i


def insert(store: Store) -> Synth:
    rng = np.random.default_rng(7)
    minutes = HOURS * 60
    cols: dict[str, list] = {
        k: []
        for k in (
            "time",
            "time_ns",
            "pop",
            "host",
            "prefix",
            "family",
            "cc",
            "cookie",
            "bytes_acked",
            "delivery_rate",
            "min_rtt",
            "busy_time",
            "bytes_sent",
            "bytes_retrans",
        )
    }
    cookie = 1
    for p, pop in enumerate(POPS):
        for i in range(PREFIXES_PER_POP):
            prefix = prefix_of(p, i)
            for m in range(minutes):
                t = T0 + dt.timedelta(minutes=m)
                rate = rate_for(i, t) * float(rng.uniform(0.9, 1.1))
                final_acked = 50_000 if m % SMALL_EVERY == SMALL_EVERY - 1 else 600_000 + 1000 * i
                on_bbr = i in TREATED and t >= T_SELECT
                for k, frac in ((0, 0.5), (1, 1.0)):
                    acked = int(final_acked * frac)
                    ts = t + dt.timedelta(seconds=10 + 20 * k)
                    cols["time"].append(np.datetime64(ts, "s"))
                    cols["time_ns"].append(int(ts.replace(tzinfo=dt.UTC).timestamp()) * 1_000_000_000)
                    cols["pop"].append(pop)
                    cols["host"].append(f"{pop}-edge1")
                    cols["prefix"].append(prefix)
                    cols["family"].append(10 if ":" in prefix else 2)
                    cols["cc"].append("bbr" if on_bbr else "cubic")
                    cols["cookie"].append(cookie)
                    cols["bytes_acked"].append(acked)
                    cols["delivery_rate"].append(int(rate))
                    cols["min_rtt"].append(40_000)
                    cols["busy_time"].append(int(acked / rate * 1e6) + 1)
                    cols["bytes_sent"].append(acked)
                    cols["bytes_retrans"].append(0)
                cookie += 1
    arrays: dict[str, Any] = {
        "time": np.array(cols["time"], dtype="datetime64[s]"),
        "time_ns": np.array(cols["time_ns"], dtype=np.uint64),
        "pop": cols["pop"],
        "host": cols["host"],
        "prefix": cols["prefix"],
        "family": np.array(cols["family"], dtype=np.uint8),
        "cc": cols["cc"],
        "cookie": np.array(cols["cookie"], dtype=np.uint64),
        "bytes_acked": np.array(cols["bytes_acked"], dtype=np.uint64),
        "delivery_rate": np.array(cols["delivery_rate"], dtype=np.uint64),
        "min_rtt": np.array(cols["min_rtt"], dtype=np.uint32),
        "busy_time": np.array(cols["busy_time"], dtype=np.uint64),
        "bytes_sent": np.array(cols["bytes_sent"], dtype=np.uint64),
        "bytes_retrans": np.array(cols["bytes_retrans"], dtype=np.uint64),
    }
    rows = store.insert_columns("tcpinfo", arrays)
    synth = Synth(buckets=minutes // 5, tcpinfo_rows=rows)
    _insert_selections(store, synth)
    _insert_configs(store, synth)
    return synth


def _insert_selections(store: Store, synth: Synth) -> None:
    sel: dict[str, list] = {
        k: []
        for k in (
            "round_id",
            "round_time",
            "pop",
            "prefix",
            "family",
            "duty_cycle",
            "flap_ratio",
            "decision",
        )
    }
    t = T0 + dt.timedelta(hours=1)
    end = T0 + dt.timedelta(hours=HOURS)
    late = T_SELECT + dt.timedelta(minutes=30)
    while t < end:
        synth.rounds.append(t)
        for p, pop in enumerate(POPS):
            new = 0
            for i in range(PREFIXES_PER_POP):
                if i in TREATED:
                    decision = "select" if t == T_SELECT else ("keep" if t > T_SELECT else "skip")
                elif i in HOLDOUT:
                    decision = "holdout" if t >= T_SELECT else "skip"
                elif i == LATE_SELECT and pop == "lax":
                    decision = "select" if t == late else ("keep" if t > late else "skip")
                else:
                    decision = "skip"
                new += decision == "select"
                sel["round_id"].append(f"r{t:%H%M}")
                sel["round_time"].append(np.datetime64(t, "s"))
                sel["pop"].append(pop)
                sel["prefix"].append(prefix_of(p, i))
                sel["family"].append(10 if i == PREFIXES_PER_POP - 1 else 2)
                sel["duty_cycle"].append(0.9 if i in SLOW else 0.0)
                sel["flap_ratio"].append(0.05)
                sel["decision"].append(decision)
            synth.new_per_round[(pop, t)] = new
        t += dt.timedelta(minutes=15)
    store.insert_columns(
        "selections",
        {
            "round_id": sel["round_id"],
            "round_time": np.array(sel["round_time"], dtype="datetime64[s]"),
            "pop": sel["pop"],
            "prefix": sel["prefix"],
            "family": np.array(sel["family"], dtype=np.uint8),
            "duty_cycle": np.array(sel["duty_cycle"], dtype=np.float64),
            "flap_ratio": np.array(sel["flap_ratio"], dtype=np.float64),
            "decision": sel["decision"],
        },
    )
    # every round was published (controller/scoring/state.py: reports count only such rounds)
    rounds = [(f"r{t:%H%M}", t, pop) for t in synth.rounds for pop in POPS]
    store.insert_columns(
        "round_outcomes",
        {
            "round_id": [r[0] for r in rounds],
            "round_time": np.array([np.datetime64(r[1], "s") for r in rounds], dtype="datetime64[s]"),
            "pop": [r[2] for r in rounds],
            "status": ["published"] * len(rounds),
        },
    )


def _insert_configs(store: Store, synth: Synth) -> None:
    one = dt.timedelta(minutes=1)
    late = T_SELECT + dt.timedelta(minutes=30)
    rows = [
        (T_SELECT + one, "lax", 1, "published", 2),
        (T_SELECT + one, "ord", 1, "published", 2),
        (late + one, "lax", 2, "published", 3),
        (late + 2 * one, "ord", 2, "rejected", 9),
    ]
    for created, pop, _, status, _ in rows:
        if status == "published":
            synth.published.setdefault(pop, []).append(created)
    store.insert_columns(
        "config_versions",
        {
            "created_at": np.array([r[0] for r in rows], dtype="datetime64[s]"),
            "pop": [r[1] for r in rows],
            "version": np.array([r[2] for r in rows], dtype=np.uint64),
            "status": [r[3] for r in rows],
            "entries": np.array([r[4] for r in rows], dtype=np.uint32),
            "kill_switch": np.zeros(len(rows), dtype=np.uint8),
        },
    )
