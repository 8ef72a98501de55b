"""controller/scoring/flaps.py against the plain definition, on random bit patterns."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.scoring.flaps import MASK_BUCKETS, flap_ratio, popcount_swar, transitions

U64 = st.integers(min_value=0, max_value=2**64 - 1)


def plain_transitions(counted: int, bad: int, width: int) -> int:
    """The definition: the flags of the counted buckets in bucket order, changes between neighbours."""
    flags = [(bad >> i) & 1 for i in range(width) if (counted >> i) & 1]
    return sum(1 for a, b in itertools.pairwise(flags) if a != b)


def plain_flap_ratio(changes: int, counted_buckets: int) -> float:
    return changes / (counted_buckets - 1) if counted_buckets > 1 else 0.0


@settings(max_examples=300, deadline=None)
@given(
    width=st.integers(min_value=0, max_value=MASK_BUCKETS),
    pairs=st.lists(st.tuples(U64, U64), min_size=0, max_size=40),
)
def test_transitions_match_the_definition(width: int, pairs: list[tuple[int, int]]) -> None:
    # masks as the SQL makes them: bits below `width` only, bad ones among the counted
    keep = (1 << width) - 1
    counted = [c & keep for c, _ in pairs]
    bad = [b & c for (_, b), c in zip(pairs, counted, strict=True)]
    got = transitions(np.array(counted, dtype=np.uint64), np.array(bad, dtype=np.uint64), width)
    assert got.dtype == np.int64
    assert got.tolist() == [plain_transitions(c, b, width) for c, b in zip(counted, bad, strict=True)]
    buckets = np.array([c.bit_count() for c in counted], dtype=np.int64)
    ratios = flap_ratio(got, buckets)
    assert ratios.tolist() == [plain_flap_ratio(int(t), int(n)) for t, n in zip(got, buckets, strict=True)]


@settings(max_examples=200, deadline=None)
@given(width=st.integers(min_value=0, max_value=MASK_BUCKETS), counted=U64, bad=U64)
def test_bits_outside_the_window_or_the_counted_buckets_are_ignored(width: int, counted: int, bad: int) -> None:
    got = transitions(np.array([counted], dtype=np.uint64), np.array([bad], dtype=np.uint64), width)
    keep = (1 << width) - 1
    assert int(got[0]) == plain_transitions(counted & keep, bad & counted & keep, width)


@pytest.mark.parametrize(
    ("counted", "bad", "expected"),
    [
        (0, 0, 0),
        (1 << 63, 1 << 63, 0),  # one counted bucket, the last bit of the mask
        ((1 << 63) | 1, 1 << 63, 1),  # the first and the last bucket: one change
        (0b10101, 0b00100, 2),  # gaps between the counted buckets are skipped: good bad good
        (0b11111, 0b01010, 4),
        (2**64 - 1, 0x5555555555555555, 63),  # every bucket flips
    ],
)
def test_known_patterns(counted: int, bad: int, expected: int) -> None:
    got = transitions(np.array([counted], dtype=np.uint64), np.array([bad], dtype=np.uint64), 64)
    assert got.tolist() == [expected]


@given(st.lists(U64, max_size=50))
def test_popcount_fallback_equals_bit_count(values: list[int]) -> None:
    got = popcount_swar(np.array(values, dtype=np.uint64))
    assert got.tolist() == [v.bit_count() for v in values]


def test_a_window_wider_than_a_mask_is_refused() -> None:
    with pytest.raises(ValueError, match="at most 64 buckets"):
        transitions(np.zeros(1, dtype=np.uint64), np.zeros(1, dtype=np.uint64), MASK_BUCKETS + 1)
