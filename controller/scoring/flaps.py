"""Flap counts from per-prefix bucket bitmasks (what scoring_prefixes.sql returns).

Bit i of a mask is bucket i of the window (i = (bucket - window start) / bucket length):
`counted` has the bits of the buckets where the prefix counted, `bad` those where it was
bad (a bad bucket is a counted one; bad bits outside `counted` are ignored).  A transition
is a bad<->good change between two consecutive counted buckets (the buckets between them
that did not count are skipped), and
    flap_ratio = transitions / (counted buckets - 1), 0 with fewer than 2 counted buckets.
One mask is one UInt64: a window of more than MASK_BUCKETS buckets cannot be packed.
Vectorized over prefixes with bitwise operations; pure numpy, no I/O.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MASK_BUCKETS", "flap_ratio", "popcount", "popcount_swar", "transitions"]

MASK_BUCKETS = 64  # bits of one UInt64 mask: the widest window packed in one


def transitions(counted: np.ndarray, bad: np.ndarray, width: int) -> np.ndarray:
    """Per prefix (int64): bad<->good changes between consecutive counted buckets among bits 0..width-1.

    Bit-parallel: each bucket that did not count takes the flag of the latest counted
    bucket below it (a prefix scan in 6 doubling steps), which makes the counted buckets
    consecutive without changing the count; the changes above the first counted bucket
    are then the set bits of filled XOR (filled << 1).
    """
    if not 0 <= width <= MASK_BUCKETS:
        raise ValueError(f"a mask holds at most {MASK_BUCKETS} buckets, not {width}")
    window = np.uint64((1 << width) - 1)
    counted = np.asarray(counted).astype(np.uint64, copy=False) & window
    filled = np.asarray(bad).astype(np.uint64, copy=False) & counted
    through = ~counted  # buckets that take their flag from below
    step = 1
    while step < MASK_BUCKETS:
        shift = np.uint64(step)
        filled |= through & (filled << shift)
        through &= through << shift
        step *= 2
    lowest = counted & (~counted + np.uint64(1))  # the first counted bucket's bit (0: none)
    above_first = ~(lowest | (lowest - np.uint64(1)))
    return popcount((filled ^ (filled << np.uint64(1))) & above_first)


def popcount(values: np.ndarray) -> np.ndarray:
    """Set bits per uint64 (int64); numpy < 2 has no bitwise_count."""
    count = getattr(np, "bitwise_count", None)
    if count is not None:
        return np.asarray(count(values)).astype(np.int64)
    return popcount_swar(values)


def popcount_swar(values: np.ndarray) -> np.ndarray:
    """Set bits per uint64 (int64) by bit arithmetic: popcount's fallback."""
    v = values - ((values >> np.uint64(1)) & np.uint64(0x5555555555555555))
    v = (v & np.uint64(0x3333333333333333)) + ((v >> np.uint64(2)) & np.uint64(0x3333333333333333))
    v = (v + (v >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return ((v * np.uint64(0x0101010101010101)) >> np.uint64(56)).astype(np.int64)


def flap_ratio(changes: np.ndarray, counted_buckets: np.ndarray) -> np.ndarray:
    """transitions / (counted - 1) per prefix (float64); 0 with fewer than 2 counted buckets."""
    changes = np.asarray(changes, dtype=np.float64)
    counted = np.asarray(counted_buckets, dtype=np.float64)
    out = np.zeros(len(counted), dtype=np.float64)
    many = counted > 1
    np.divide(changes, counted - 1.0, out=out, where=many)
    return out
