"""Numpy columns to and from the scoring's DataFrames, without per-row pandas work.

String columns are object arrays of `str` (both store back ends' strings and bytes are
turned into `str` once); rows are ordered by (pop, prefix) through one sort key per row,
'pop\\0prefix', which orders like the pair (neither holds a NUL character).  Pure.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


def texts(values: Any) -> np.ndarray:
    """An object array of `str` (bytes decoded)."""
    out = np.asarray(values, dtype=object)
    if len(out) and not (isinstance(out[0], str) and isinstance(out[-1], str)):
        out = np.array([v.decode() if isinstance(v, bytes) else str(v) for v in out.tolist()], dtype=object)
    return out


def typed(values: Any, dtype: str) -> np.ndarray:
    """The column as a numpy array of `dtype` ('object' = texts); a missing value (NaN) in a
    column of integers is 0, as in a column the frame lacks (columns_of)."""
    if dtype == "object":
        return texts(values)
    arr = np.asarray(values)
    target = np.dtype(dtype)
    if target.kind in "iu" and arr.dtype.kind == "f" and np.isnan(arr).any():
        arr = np.nan_to_num(arr, nan=0.0)
    return arr.astype(target)


def sort_key(pops: np.ndarray, prefixes: np.ndarray) -> np.ndarray:
    """'pop\\0prefix' per row (an object array): sorting it sorts by pop, then prefix."""
    return np.array([f"{a}\0{b}" for a, b in zip(pops.tolist(), prefixes.tolist(), strict=True)], dtype=object)


def sorting(key: np.ndarray) -> np.ndarray | None:
    """The stable permutation that sorts `key`, or None when it is strictly increasing already."""
    if len(key) < 2 or bool((key[1:] > key[:-1]).all()):
        return None
    return np.argsort(key, kind="stable")


def pop_bounds(pops: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each POP's rows in `pops` (sorted by POP)."""
    n = len(pops)
    if n == 0:
        return []
    cuts = (np.flatnonzero(pops[1:] != pops[:-1]) + 1).tolist()
    return list(zip([0, *cuts], [*cuts, n], strict=True))


def columns_of(df: pd.DataFrame | None, schema: dict[str, str]) -> dict[str, np.ndarray]:
    """The frame's columns named in `schema` (name -> dtype), typed; a column the frame lacks
    (rows of an older schema) is 0 / nan / '' on each row; no rows: empty columns."""
    out = {}
    rows = 0 if df is None else len(df)
    for name, dtype in schema.items():
        if df is not None and name in df and rows:
            out[name] = typed(df[name], dtype)
        elif rows:
            fill: object = "" if dtype == "object" else (math.nan if dtype == "float64" else 0)
            out[name] = np.full(rows, fill, dtype=np.dtype(dtype))
        else:
            out[name] = np.array([], dtype=np.dtype(dtype))
    return out


def by_pop_prefix(columns: dict[str, np.ndarray], unique: bool = False) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The columns ordered by (pop, prefix), stable, and their sort keys; unique: only the
    first row of each pair."""
    key = sort_key(columns["pop"], columns["prefix"])
    order = sorting(key)
    if order is not None:
        columns = {name: col[order] for name, col in columns.items()}
        key = key[order]
    if unique and len(key) > 1 and not bool((key[1:] != key[:-1]).all()):
        first = np.concatenate([[True], key[1:] != key[:-1]])
        columns = {name: col[first] for name, col in columns.items()}
        key = key[first]
    return columns, key


def frame(columns: dict[str, np.ndarray], rows: np.ndarray | None = None) -> pd.DataFrame:
    """A DataFrame of numpy columns (strings stay object columns), optionally only `rows`."""
    import pandas as pd

    data: dict[str, Any] = {}
    for name, col in columns.items():
        values = col if rows is None else col[rows]
        data[name] = pd.Series(values, dtype=object, copy=False) if values.dtype == object else values
    return pd.DataFrame(data, copy=False)
