"""The column values a bulk insert takes (Store.bulk_insert): numpy arrays and StrColumn.

A String column may be a StrColumn, codes into a small table of distinct values, so a
writer can serialize it without one Python object per row; plain_columns turns such
columns back into the numpy/object columns Store.insert_columns takes.  Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["Prepared", "StrColumn", "numpy_dtype", "plain_columns"]

_NUMPY: dict[str, np.dtype] = {
    "UInt8": np.dtype("<u1"),
    "UInt16": np.dtype("<u2"),
    "UInt32": np.dtype("<u4"),
    "UInt64": np.dtype("<u8"),
    "DateTime": np.dtype("<u4"),
}


@dataclass
class StrColumn:
    """A String column as codes into `values` (row i is values[codes[i]])."""

    codes: np.ndarray
    values: list[str]

    def __len__(self) -> int:
        return int(self.codes.shape[0])

    def to_objects(self) -> np.ndarray:
        return np.array(self.values, dtype=object)[self.codes]


Prepared = dict[str, "np.ndarray | StrColumn"]


def numpy_dtype(ch_type: str) -> np.dtype | None:
    """The little-endian numpy dtype of a ClickHouse integer/DateTime type, else None."""
    return _NUMPY.get(ch_type)


def plain_columns(prepared: Mapping[str, np.ndarray | StrColumn]) -> dict[str, np.ndarray]:
    """Plain numpy/object columns for Store.insert_columns."""
    return {name: col.to_objects() if isinstance(col, StrColumn) else col for name, col in prepared.items()}
