"""The column values a bulk insert takes (Store.bulk_insert): numpy arrays and StrColumn.

A String column may be a StrColumn, codes into a small table of distinct values, so a
writer can serialize it without one Python object per row; plain_columns turns such
columns back into the numpy/object columns Store.insert_columns takes.  The columns of one
bulk insert may also come as BlockColumns: consecutive blocks made on demand, so a back end
that streams them (the ClickHouse server: one INSERT of several Native blocks) holds one
block at a time.  Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["BlockColumns", "Prepared", "StrColumn", "join_blocks", "numpy_dtype", "plain_columns"]

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


class BlockColumns(Mapping[str, np.ndarray | StrColumn]):
    """The columns of one bulk insert as consecutive blocks, each made when it is asked for.

    `blocks()` makes them anew on every call: (columns, rows) per block, every block with the
    columns `names` in that order.  `types` (column -> ClickHouse type as the table declares
    it, or None) lets a back end serialize each block ahead of the server's answer.  As a
    Mapping the blocks are made once and joined (join_blocks), for a back end that inserts one
    block: that holds every block at once, the memory streaming saves.  `rows` is the
    expected total; a block maker may leave rows out (its own business: ingest drops batches
    the decoder refuses), so a streaming back end counts what it sent.
    """

    def __init__(
        self,
        names: Sequence[str],
        rows: int,
        make: Callable[[], Iterator[tuple[Prepared, int]]],
        types: Mapping[str, str] | None = None,
    ) -> None:
        self.names = list(names)
        self.rows = rows
        self.types = dict(types) if types is not None else None
        self._make = make
        self._joined: Prepared | None = None

    def blocks(self) -> Iterator[tuple[Prepared, int]]:
        """The blocks, each made when the iteration reaches it (checked: the columns `names`)."""
        for columns, rows in self._make():
            if list(columns) != self.names:
                raise ValueError(f"a block has the columns {list(columns)}, not {self.names}")
            yield columns, rows
            del columns  # not kept while the next block is made

    def joined(self) -> Prepared:
        """Every block joined into one set of columns (made once, then kept)."""
        if self._joined is None:
            self._joined = join_blocks(self.names, [c for c, _ in self.blocks()])
        return self._joined

    def __getitem__(self, name: str) -> np.ndarray | StrColumn:
        return self.joined()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


def join_blocks(names: Sequence[str], blocks: Sequence[Mapping[str, np.ndarray | StrColumn]]) -> Prepared:
    """The blocks' columns end to end (StrColumns: one table of distinct values)."""
    out: Prepared = {}
    for name in names:
        parts = [b[name] for b in blocks]
        if parts and all(isinstance(p, StrColumn) for p in parts):
            table: dict[str, int] = {}
            codes = []
            for p in parts:
                assert isinstance(p, StrColumn)
                lut = np.array([table.setdefault(v, len(table)) for v in p.values] or [0], dtype=np.int32)
                codes.append(lut[np.asarray(p.codes, dtype=np.int64)])
            out[name] = StrColumn(np.concatenate(codes), list(table))
        elif parts:
            arrays = [p.to_objects() if isinstance(p, StrColumn) else p for p in parts]
            out[name] = np.concatenate(arrays)
        else:
            out[name] = np.zeros(0, dtype=np.uint8)
    return out


def numpy_dtype(ch_type: str) -> np.dtype | None:
    """The little-endian numpy dtype of a ClickHouse integer/DateTime type, else None."""
    return _NUMPY.get(ch_type)


def plain_columns(prepared: Mapping[str, np.ndarray | StrColumn]) -> dict[str, np.ndarray]:
    """Plain numpy/object columns for Store.insert_columns."""
    return {name: col.to_objects() if isinstance(col, StrColumn) else col for name, col in prepared.items()}
