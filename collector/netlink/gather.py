"""Vectorised reads of fixed-width attribute payloads out of a parse buffer (pure, numpy).

Contract: `gather_words(base, pos, payload_len, nwords)` returns one row of
`nwords` little-endian u32 words per message, read at byte offset `pos`
(4-aligned; -1 = attribute absent, row all zero).  Words at or past the
attribute's `payload_len` bytes read as zero, so a short attribute never
leaks the bytes of the next one, and a long one is cut to `nwords` words.
The buffer must extend `nwords` words past every present position (parse
buffers carry `sockdiag_parse.PAD` zero bytes); no input makes it raise.
"""

from __future__ import annotations

import numpy as np

__all__ = ["gather_words", "records"]


def records(base: np.ndarray, nwords: int) -> np.ndarray:
    """Every 4-aligned nwords-word window of the buffer as one opaque record (a view, no copy).

    Indexing it with word positions copies whole records (a memcpy per row),
    several times faster than an element-wise gather.
    """
    count = max((base.nbytes - 4 * nwords) // 4 + 1, 0)
    return np.ndarray(buffer=base, dtype=np.dtype((np.void, 4 * nwords)), shape=(count,), strides=(4,))


def gather_words(base: np.ndarray, pos: np.ndarray, payload_len: np.ndarray, nwords: int) -> np.ndarray:
    """(rows, nwords) uint32 words from byte offset pos (4-aligned, -1 = absent).

    Words at or past payload_len bytes are zero.
    """
    rows = pos.shape[0]
    have = pos >= 0
    all_there = bool(have.all())
    if not all_there and not have.any():
        return np.zeros((rows, nwords), dtype=np.uint32)
    recs = records(base, nwords)
    if all_there:
        out = recs[pos >> 2].view(np.uint32).reshape(rows, nwords)
    else:
        out = np.zeros((rows, nwords), dtype=np.uint32)
        out[have] = recs[pos[have] >> 2].view(np.uint32).reshape(-1, nwords)
    nvalid = np.minimum(np.maximum(payload_len, 0) // 4, nwords)
    short = have & (nvalid < nwords)
    if short.any():
        out[short] *= (np.arange(nwords) < nvalid[short][:, None]).astype(np.uint32)
    return out
