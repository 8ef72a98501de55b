"""The controller's state in the `selections` table: read the previous round, write this one.

Every round writes one row per scored prefix plus every prefix carrying state
(on BBR, holdout, cooldown), so the rows of a POP's latest round are the whole
state: which prefixes are on BBR since when, holdouts, cooldowns, baselines.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import numpy as np

from controller.scoring_decide import ON_BBR, STATE_COLUMNS, empty_state
from controller.sql_params import quote

if TYPE_CHECKING:
    import pandas as pd

    from controller.store import Store

RECENT_DAYS = 2  # look for the latest round here first (a bounded scan), then everywhere


def latest_rounds(store: Store, pop: str, now: dt.datetime) -> dict[str, int]:
    """round_time_ns of the latest round per POP (pop '' = every POP)."""
    sql = (
        "SELECT pop, max(round_time_ns) AS ns FROM selections "
        "WHERE (%(pop)s = '' OR pop = %(pop)s) {recent} GROUP BY pop"
    )
    recent = sql.replace("{recent}", "AND round_time >= %(since)s")
    since = now - dt.timedelta(days=RECENT_DAYS)
    rows = store.query_rows(recent, {"pop": pop, "since": since})
    if not rows:
        rows = store.query_rows(sql.replace("{recent}", ""), {"pop": pop})
    return {_text(p): int(ns) for p, ns in rows}


def load_previous(store: Store, pop: str, now: dt.datetime) -> pd.DataFrame:
    """The previous round's rows (STATE_COLUMNS) for one POP or every POP."""
    import pandas as pd

    latest = latest_rounds(store, pop, now)
    if not latest:
        return empty_state()
    keys = ", ".join(f"({quote(p)}, {ns})" for p, ns in sorted(latest.items()))
    df = store.query_df(
        "SELECT pop, prefix, decision, toUInt32(selected_since) AS selected_since, "
        "toUInt32(holdout_since) AS holdout_since, toUInt32(cooldown_until) AS cooldown_until, "
        "toUInt32(last_seen) AS last_seen, baseline_low_rate "
        f"FROM selections WHERE (pop, round_time_ns) IN ({keys})"
    )
    out = pd.DataFrame({name: df[name] for name in STATE_COLUMNS})
    for name, dtype in STATE_COLUMNS.items():
        col = out[name]
        out[name] = col.map(_text).astype(object) if dtype == "object" else col.astype(np.dtype(dtype))
    return out


def on_bbr(previous: pd.DataFrame) -> pd.DataFrame:
    return previous[previous["decision"].isin(ON_BBR)]


def _datetimes(seconds: Any) -> np.ndarray:
    return np.asarray(seconds, dtype="int64").astype("datetime64[s]")


def write_round(store: Store, decisions: pd.DataFrame, round_id: str, round_time_ns: int) -> int:
    """Insert the round's decision rows into `selections`; returns the rows written."""
    n = len(decisions)
    if n == 0:
        return 0
    d = decisions
    round_s = round_time_ns // 1_000_000_000

    def clip16(col: str) -> np.ndarray:
        return np.clip(d[col].to_numpy(dtype="int64"), 0, 65535).astype("uint16")

    columns: dict[str, Any] = {
        "round_id": [round_id] * n,
        "round_time": _datetimes(np.full(n, round_s)),
        "round_time_ns": np.full(n, round_time_ns, dtype="uint64"),
        "pop": d["pop"].astype(str).tolist(),
        "prefix": d["prefix"].astype(str).tolist(),
        "family": d["family"].to_numpy(dtype="uint8"),
        "samples": d["samples"].to_numpy(dtype="uint64"),
        "qualifying": d["qualifying"].to_numpy(dtype="uint64"),
        "counted_buckets": clip16("counted_buckets"),
        "bad_buckets": clip16("bad_buckets"),
        "transitions": clip16("transitions"),
        "duty_cycle": d["duty_cycle"].to_numpy(dtype="float64"),
        "flap_ratio": d["flap_ratio"].to_numpy(dtype="float64"),
        "median_delivery_rate": d["median_delivery_rate"].to_numpy(dtype="float64"),
        "low_delivery_rate": d["low_delivery_rate"].to_numpy(dtype="float64"),
        "median_min_rtt_ms": d["median_min_rtt_ms"].to_numpy(dtype="float64"),
        "decision": d["decision"].astype(str).tolist(),
        "algorithm": d["algorithm"].astype(str).tolist(),
        "reason": d["reason"].astype(str).tolist(),
        "holdout": d["holdout"].to_numpy(dtype="uint8"),
        "selected_since": _datetimes(d["selected_since"]),
        "holdout_since": _datetimes(d["holdout_since"]),
        "cooldown_until": _datetimes(d["cooldown_until"]),
        "last_seen": _datetimes(d["last_seen"]),
        "baseline_low_rate": d["baseline_low_rate"].to_numpy(dtype="float64"),
        "effect": d["effect"].to_numpy(dtype="float64"),
        "holdout_effect": d["holdout_effect"].to_numpy(dtype="float64"),
    }
    return store.insert_columns("selections", columns)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
