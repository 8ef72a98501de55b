"""Which shard each tcpinfo row goes to, and which rows a shard already holds.  Pure.

A cluster shards rows by client prefix (controller/store/topology.py); the loader sends
each shard its own rows.  A batch whose rows span shards has one ledger entry per shard
that holds its rows (the ledger's view runs on the shard that takes the insert), so a
batch redelivered after a crash between two shards' inserts is loaded only where its
rows are missing: rows_to_load() keeps a row unless its batch is in its shard's ledger.
On one server (one shard) this is the plain "skip batches already in the ledger".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from controller.store.columns import Prepared, StrColumn
from controller.store.topology import shard_key, shards_for_keys

__all__ = ["row_shards", "rows_to_load", "take_rows"]


def row_shards(columns: Prepared, weights: Sequence[int]) -> np.ndarray:
    """The 0-based shard of every row, from its pop and prefix (computed once per distinct pair)."""
    pop, prefix = columns["pop"], columns["prefix"]
    if not isinstance(pop, StrColumn) or not isinstance(prefix, StrColumn):
        raise TypeError("pop and prefix must be StrColumns")
    if len(weights) == 1:
        return np.zeros(len(prefix), dtype=np.int64)
    width = max(len(prefix.values), 1)
    pairs = pop.codes.astype(np.int64) * width + prefix.codes.astype(np.int64)
    distinct, inverse = np.unique(pairs, return_inverse=True)
    keys = np.fromiter(
        (shard_key(pop.values[int(p) // width], prefix.values[int(p) % width]) for p in distinct),
        dtype=np.uint64,
        count=len(distinct),
    )
    return shards_for_keys(keys, weights)[inverse.reshape(-1)]


def rows_to_load(row_batch: np.ndarray, row_shard: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Mask of the rows to insert: `present[b, s]` says batch b is in shard s's ledger."""
    if row_batch.shape[0] == 0:
        return np.zeros(0, dtype=bool)
    return ~present[row_batch, row_shard]


def take_rows(columns: Prepared, rows: np.ndarray) -> Prepared:
    """The rows `rows` (indexes or a mask) of every column."""
    return {
        name: StrColumn(col.codes[rows], col.values) if isinstance(col, StrColumn) else col[rows]
        for name, col in columns.items()
    }
