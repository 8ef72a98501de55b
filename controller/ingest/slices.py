"""Pure helpers of the writer's inserts (controller/ingest/writer.py): cutting a group's batches
into slices and blocks of whole batches (`slice_bounds`), the rows of some batches
(`take_batches`), and the two column checks the writer makes before decoding
(`value_errors`: cc_index and client_prefix_len, with the decoder's reasons; the decoder stays
the authority on each slice).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from controller.ingest.columns import Prepared, StrColumn
from schemas.tcpinfo_columns import COLUMN_DTYPES, COLUMNS
from schemas.tcpinfo_decode import MAX_PREFIX_LEN, ScannedBatch

__all__ = ["slice_bounds", "take_batches", "value_errors"]


def slice_bounds(batch_rows: Sequence[int], limit: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges of consecutive batches with at most `limit` rows each, of about equal rows.

    A batch of more than `limit` rows goes alone.  Pure.
    """
    total = sum(batch_rows)
    if not batch_rows:
        return []
    if total <= limit:
        return [(0, len(batch_rows))]
    ends = np.cumsum(np.asarray(batch_rows, dtype=np.int64))
    k = -(-total // limit)
    while True:
        # cut at the batch boundary nearest to each j * total / k
        targets = np.arange(1, k, dtype=np.float64) * (total / k)
        after = np.searchsorted(ends, targets)  # the batch holding each target
        nearer_before = (after > 0) & (targets - np.where(after > 0, ends[after - 1], 0) <= ends[after] - targets)
        cuts = np.unique(np.where(nearer_before, after, after + 1))
        cuts = cuts[(cuts > 0) & (cuts < len(batch_rows))]
        bounds = list(zip([0, *cuts.tolist()], [*cuts.tolist(), len(batch_rows)], strict=True))
        starts = np.concatenate([[0], ends])
        if all(starts[hi] - starts[lo] <= limit or hi - lo == 1 for lo, hi in bounds) or k >= len(batch_rows):
            break
        k += 1
    return _split_over(bounds, starts, limit)


def _split_over(bounds: list[tuple[int, int]], starts: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """`bounds` with every range over `limit` rows (of more than one batch) cut greedily."""
    out: list[tuple[int, int]] = []
    for lo, hi in bounds:
        first = lo
        for i in range(lo + 1, hi):
            if starts[i + 1] - starts[first] > limit:
                out.append((first, i))
                first = i
        out.append((first, hi))
    return out


_CC_INDEX, _PREFIX_LEN = "cc_index", "client_prefix_len"
_CHECKED = [(COLUMNS.index(name), name, COLUMN_DTYPES[name]) for name in (_CC_INDEX, _PREFIX_LEN)]


def value_errors(batches: Sequence[ScannedBatch]) -> dict[int, str]:
    """{index: reason} of the batches whose values decode_group refuses: cc_index, client_prefix_len.

    Read from those two columns alone (the rows are decoded later, slice by slice), with the
    decoder's reasons; decode_all on each slice stays the authority (insert(): what it still
    refuses is dead-lettered there).
    """
    bad: dict[int, str] = {}
    for i, b in enumerate(batches):
        if not b.rows:
            continue
        top: dict[str, int] = {}
        for k, name, dtype in _CHECKED:
            if b.spans is None:
                values = b.columns[name] if b.columns is not None else None
            else:
                start, end = (int(x) for x in b.spans[k])
                fits = end - start == b.rows * dtype.itemsize
                values = np.frombuffer(b.data, dtype=dtype, count=b.rows, offset=start) if fits else None
            if values is None or not len(values):
                break  # the decoder reports it
            top[name] = int(values.max())
        else:
            names = len(b.header.cc_names)
            if top[_CC_INDEX] >= names:
                bad[i] = f"cc_index {top[_CC_INDEX]} outside cc_names ({names} names)"
            elif top[_PREFIX_LEN] > MAX_PREFIX_LEN:
                bad[i] = f"client_prefix_len {top[_PREFIX_LEN]} > {MAX_PREFIX_LEN}"
    return bad


def take_batches(columns: Prepared, offsets: np.ndarray, batches: list[int]) -> tuple[Prepared, int]:
    """The rows of some batches (indexes into the batches whose rows `columns` holds, in order)."""
    rows = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in batches])
    out: Prepared = {
        name: StrColumn(col.codes[rows], col.values) if isinstance(col, StrColumn) else col[rows]
        for name, col in columns.items()
    }
    return out, int(rows.shape[0])
