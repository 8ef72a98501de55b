"""The decision's input as columns: the round's scores joined with the previous state
(controller/scoring/decide.py), and the state columns carried from round to round.  Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from controller.scoring.frames import by_pop_prefix, columns_of, texts
from controller.scoring.pins import Pin
from controller.scoring.query import SCORE_COLUMNS
from schemas.addresses import prefix_family

if TYPE_CHECKING:
    import pandas as pd

# State columns carried from round to round (see sql/migrations/003_controller.sql).
STATE_COLUMNS: dict[str, str] = {
    "pop": "object",
    "prefix": "object",
    "decision": "object",
    "selected_since": "int64",
    "holdout_since": "int64",
    "cooldown_until": "int64",
    "last_seen": "int64",
    "baseline_low_rate": "float64",
    "trial_since": "int64",
    "trial_effect": "float64",
    "trial_low": "float64",
    "trial_high": "float64",
}


def empty_state() -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame({name: pd.Series([], dtype=dtype) for name, dtype in STATE_COLUMNS.items()})


def with_pinned_rows(previous: pd.DataFrame, scores: pd.DataFrame, pins: Mapping[tuple[str, str], Pin]) -> pd.DataFrame:
    """`previous` plus an empty state row (decision '') for each pinned (pop, prefix) that has
    neither scores nor state, so a pin reaches the decisions (and the config) without data."""
    import pandas as pd

    known = set(zip(texts(previous["pop"]).tolist(), texts(previous["prefix"]).tolist(), strict=True))
    known |= set(zip(texts(scores["pop"]).tolist(), texts(scores["prefix"]).tolist(), strict=True))
    missing = sorted(k for k in pins if k not in known)
    if not missing:
        return previous
    extra = {
        name: [k[0] for k in missing]
        if name == "pop"
        else [k[1] for k in missing]
        if name == "prefix"
        else [""] * len(missing)
        if dtype == "object"
        else np.full(len(missing), math.nan if dtype == "float64" else 0, dtype=dtype)
        for name, dtype in STATE_COLUMNS.items()
    }
    rows = pd.DataFrame(extra)
    return rows if previous.empty else pd.concat([previous, rows], ignore_index=True)


def joined_columns(scores: pd.DataFrame, previous: pd.DataFrame) -> tuple[int, dict[str, np.ndarray], np.ndarray]:
    """The scores and the previous state as columns over the union of their (pop, prefix)s,
    sorted; scores missing: 0 / NaN (family: the prefix's), state missing: 0 / NaN / ''.
    Returns (rows, columns, scored)."""
    s, skey = by_pop_prefix(columns_of(scores, SCORE_COLUMNS))
    p, pkey = by_pop_prefix(columns_of(previous, STATE_COLUMNS), unique=True)  # a duplicate: the first counts
    index = dict(zip(skey.tolist(), range(len(skey)), strict=True))
    at = np.fromiter((index.get(k, -1) for k in pkey.tolist()), dtype=np.int64, count=len(pkey))
    only_prev = np.flatnonzero(at < 0)
    n_s = len(skey)
    if len(only_prev):  # state rows without scores go where they sort among the scored rows
        spots = np.searchsorted(skey, pkey[only_prev]) if n_s else np.zeros(len(only_prev), dtype=np.int64)
        position = np.arange(n_s) + np.searchsorted(spots, np.arange(n_s), side="right")
        prev_position = spots + np.arange(len(only_prev))
    else:
        position, prev_position = np.arange(n_s), np.zeros(0, dtype=np.int64)
    n = n_s + len(only_prev)
    scored = np.zeros(n, dtype=bool)
    scored[position] = True
    cols: dict[str, np.ndarray] = {}
    for name, dtype in SCORE_COLUMNS.items():
        if dtype == "object":
            col = np.empty(n, dtype=object)
            col[position] = s[name]
            col[prev_position] = p[name][only_prev]
        else:
            col = np.zeros(n, dtype=dtype) if dtype == "int64" else np.full(n, math.nan)
            col[position] = s[name]
        cols[name] = col
    if len(only_prev):  # rows carried from the state without data: their prefix's family, not 0
        cols["family"][prev_position] = [prefix_family(str(x)) for x in p["prefix"][only_prev].tolist()]
    row_of_prev = np.empty(len(pkey), dtype=np.int64)  # each state row's row in the union
    matched = at >= 0
    row_of_prev[matched] = position[at[matched]]
    row_of_prev[only_prev] = prev_position
    decision = np.full(n, "", dtype=object)
    decision[row_of_prev] = p["decision"]
    cols["prev_decision"] = decision
    for name in ("selected_since", "holdout_since", "cooldown_until", "last_seen", "trial_since"):
        col = np.zeros(n, dtype="int64")
        col[row_of_prev] = p[name]
        cols[name] = col
    for name in ("baseline_low_rate", "trial_effect", "trial_low", "trial_high"):
        col = np.full(n, math.nan)
        col[row_of_prev] = p[name]
        cols[name] = col
    return n, cols, scored
