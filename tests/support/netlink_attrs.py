"""Helpers of the per-attribute decoder tests: the xtcp2 single-attribute fixtures and a buffer builder.

The fixtures live outside the repository, in `../shared/fixtures/xtcp2` (third-party data,
never copied here); `require_xtcp2()` skips the calling test cleanly when that folder is absent
(the hypothesis tests, which need no fixture, still run).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from collector.netlink.sockdiag_parse import PAD
from tests.support.netlink_pcap import rtattr

XTCP2 = Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "xtcp2"


def require_xtcp2() -> None:
    """Skip the calling test when the third-party fixtures are absent."""
    if not XTCP2.is_dir():
        pytest.skip("third-party netlink fixtures absent: ../shared/fixtures/xtcp2 (next to the repository) is missing")


@cache
def expected() -> dict[str, Any]:
    """EXPECTED.json: the values xtcp2's own tests assert, by '<kernel>/<file>'."""
    data: dict[str, Any] = json.loads((XTCP2 / "EXPECTED.json").read_text())
    return data


def attribute_files(prefix: str) -> list[Path]:
    """Every xtcp2 `<kernel>/<prefix>*` file (sorted), e.g. prefix 'attribute_cong'."""
    return sorted(XTCP2.glob(f"*/{prefix}*"))


def key(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def read_attr(path: Path) -> tuple[int, bytes]:
    """(rta_type, payload) of a single-attribute file."""
    return rtattr(path.read_bytes())


def layout(payloads: Sequence[bytes | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A parse buffer holding the payloads back to back (4-aligned, each after a junk 4-byte
    header word and followed by 0xAB filler up to the next word) plus PAD zero bytes, as
    (base, pos, length) for a decoder.  None = attribute absent (pos -1)."""
    buf = bytearray()
    pos: list[int] = []
    length: list[int] = []
    for p in payloads:
        buf += b"\xee" * 4  # the attribute header a decoder must not read
        if p is None:
            pos.append(-1)
            length.append(0)
            continue
        pos.append(len(buf))
        length.append(len(p))
        buf += p + b"\xab" * (-len(p) % 4)
    buf += b"\xcd" * 64 + bytes(PAD)  # the next message's bytes, then the padding
    return np.frombuffer(bytes(buf), dtype=np.uint8), np.array(pos, dtype=np.int64), np.array(length, dtype=np.int64)


def row(cols: dict[str, np.ndarray], i: int) -> dict[str, int]:
    return {name: int(col[i]) for name, col in cols.items()}
