"""Pins: an operator's fixed decision for one prefix at one POP, held by every round.

`dyncc control pin PREFIX --pop POP --algorithm bbr|cubic --by WHO --why TEXT` appends a row to
`pins` (sql/migrations/012_operator_controls.sql), `unpin` appends an 'unpin' row; the latest row
of a (pop, prefix) is in force.  Every round reads the pins in force (`load_pins`) and decides a
pinned prefix `pin` with the pinned algorithm (controller/scoring/decide.py): a bbr pin is in the
POP's signed config, a cubic pin is not, whatever the scores, trials, caps or holds would do.

`Pin` and `pin_reason` are pure; `load_pins`, `write_pin` and `pins_frame` are the store I/O.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from controller.store.sql import query

if TYPE_CHECKING:
    import pandas as pd

    from controller.store import Store

__all__ = ["PIN", "PIN_ALGORITHMS", "UNPIN", "Pin", "load_pins", "pin_reason", "pins_frame", "write_pin"]

PIN, UNPIN = "pin", "unpin"
PIN_ALGORITHMS = ("bbr", "cubic")
PIN_TABLE = "pins"


@dataclass(frozen=True)
class Pin:
    """A pin in force: the algorithm, who pinned, why and when (Unix ns)."""

    pop: str
    prefix: str
    algorithm: str
    who: str
    why: str
    at_ns: int

    @property
    def at(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.at_ns // 1_000_000_000, dt.UTC)


def pin_reason(pin: Pin) -> str:
    """The reason a round records for a pinned prefix."""
    return f"pinned to {pin.algorithm} by {pin.who} at {pin.at:%Y-%m-%d %H:%M} UTC: {pin.why}"


def load_pins(store: Store, pop: str = "") -> dict[tuple[str, str], Pin]:
    """(pop, prefix) -> the pin in force, for `pop` ('' = every POP); {} on a store without the
    table (a round on a store from before sql/migrations/012)."""
    if not store.table_exists(PIN_TABLE):
        return {}
    rows = store.query_rows(query("store_pins"), {"pop": pop})
    out = {}
    for p, x, algorithm, who, why, at_ns, _ts in rows:
        pin = Pin(_text(p), _text(x), _text(algorithm), _text(who), _text(why), int(at_ns))
        out[(pin.pop, pin.prefix)] = pin
    return out


def write_pin(
    store: Store, pop: str, prefix: str, action: str, algorithm: str, who: str, why: str, at_ns: int | None = None
) -> int:
    """Append one pins row (action PIN or UNPIN; `at_ns` default: now)."""
    if action not in (PIN, UNPIN):
        raise ValueError(f"action {action!r}: use {PIN} or {UNPIN}")
    ns = time.time_ns() if at_ns is None else at_ns
    return store.insert_columns(
        PIN_TABLE,
        {
            "pop": [pop],
            "prefix": [prefix],
            "action": [action],
            "algorithm": [algorithm if action == PIN else ""],
            "who": [who],
            "why": [why],
            "at_time": np.array([ns // 1_000_000_000], dtype="int64").astype("datetime64[s]"),
            "at_ns": np.array([ns], dtype="uint64"),
        },
    )


def pins_frame(pins: Mapping[tuple[str, str], Pin]) -> pd.DataFrame:
    """The pins as a frame (pop, prefix, algorithm, who, why, at), sorted by pop and prefix."""
    import pandas as pd

    ordered = [pins[k] for k in sorted(pins)]
    return pd.DataFrame(
        {
            "pop": [p.pop for p in ordered],
            "prefix": [p.prefix for p in ordered],
            "algorithm": [p.algorithm for p in ordered],
            "who": [p.who for p in ordered],
            "why": [p.why for p in ordered],
            "at": [f"{p.at:%Y-%m-%d %H:%M:%S} UTC" for p in ordered],
        }
    )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
