"""Test-only conveniences over schemas.tcpinfo_encode (the collector joins header and body parts
itself, in one copy, and needs neither):

  * `split_bodies(columns, max_rows, max_bytes)`: split_body_parts() with each body joined;
  * `encode_batches(columns, header, first_sequence, ...)`: a whole poll's TcpInfoBatch
    messages, the same bytes the collector sends for it, in one call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from schemas.tcpinfo_columns import DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS
from schemas.tcpinfo_encode import BatchHeader, encode_header, split_body_parts


def split_bodies(
    columns: Mapping[str, np.ndarray],
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[tuple[int, bytes]]:
    """(row_count, body) pairs in row order (see split_body_parts); a body is the column fields
    only (concatenate after encode_header())."""
    return [(n, b"".join(parts)) for n, parts in split_body_parts(columns, max_rows, max_bytes)]


def encode_batches(
    columns: Mapping[str, np.ndarray],
    header: BatchHeader,
    first_sequence: int,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[bytes]:
    """Serialized TcpInfoBatch messages for one poll, sequences first_sequence, +1, ...

    Only the last batch carries batch_count and the poll totals (as the
    collector sends them); a poll with no rows still yields that one (empty) batch.
    """
    bodies = split_bodies(columns, max_rows, max_bytes) or [(0, b"")]
    count = len(bodies)
    partial = replace(header, poll_end_ns=0, sockets_seen=0, sockets_exported=0, sockets_filtered=0, parse_errors={})
    return [
        encode_header(
            header if i == count - 1 else partial,
            sequence=first_sequence + i,
            batch_index=i,
            batch_count=count if i == count - 1 else 0,
            row_count=n,
        )
        + body
        for i, (n, body) in enumerate(bodies)
    ]
