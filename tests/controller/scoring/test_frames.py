"""controller/scoring/frames.py: typed columns (a missing integer is 0, never a cast of NaN)
and the (pop, prefix) order."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from controller.scoring.decide import STATE_COLUMNS, empty_state
from controller.scoring.frames import by_pop_prefix, columns_of, typed


def test_a_missing_integer_is_zero_without_a_cast_warning() -> None:
    # a state frame put together from frames with other columns (pd.concat leaves NaN)
    state = pd.concat([empty_state(), pd.DataFrame({"pop": ["p"], "prefix": ["192.0.2.0/24"], "decision": ["keep"]})])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cols = columns_of(state, STATE_COLUMNS)
    assert cols["trial_since"].tolist() == [0] and cols["selected_since"].dtype == np.int64
    assert np.isnan(cols["baseline_low_rate"][0])  # a missing float stays NaN
    assert typed(np.array([1.0, 2.0]), "int64").tolist() == [1, 2]
    assert typed(np.array([3, 4], dtype=np.uint16), "int64").dtype == np.int64


def test_rows_ordered_by_pop_then_prefix_and_unique() -> None:
    cols = {
        "pop": np.array(["b", "a", "a", "b"], dtype=object),
        "prefix": np.array(["1", "2", "1", "1"], dtype=object),
        "n": np.array([0, 1, 2, 3]),
    }
    ordered, key = by_pop_prefix(cols, unique=True)
    assert list(zip(ordered["pop"], ordered["prefix"], strict=True)) == [("a", "1"), ("a", "2"), ("b", "1")]
    assert ordered["n"].tolist() == [2, 1, 0]  # stable: the first ("b", "1") row is kept
    assert len(key) == 3
