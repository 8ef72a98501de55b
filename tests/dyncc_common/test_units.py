"""dyncc_common.units: the one parse_size is the union of the collector's and the publisher's old grammars.

The two old parsers are copied here verbatim as oracles: every string either accepted parses
to the same number with the new one, and a string both refused is refused.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dyncc_common.errors import ConfigError
from dyncc_common.units import parse_duration, parse_size

# collector/collect_config.py before the restructure
_SIZE_COLLECT = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)


def old_collect(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    m = _SIZE_COLLECT.match(str(value))
    if not m:
        return None
    unit = (m.group(2) or "").lower()[:1]
    return int(m.group(1)) * {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit]


# controller/publisher.py before the restructure
_SIZE_PUBLISH = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)


def old_publish(text: str) -> int | None:
    match = _SIZE_PUBLISH.match(text)
    if not match:
        return None
    scale = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}[match.group(2).lower()]
    return int(float(match.group(1)) * scale)


def new(value: Any) -> int | None:
    try:
        return parse_size(value, "size")
    except ConfigError:
        return None


SPACE = st.sampled_from(["", " ", "  ", "\t"])
UNIT = st.sampled_from(["", "b", "B", "i", "ib", "iB", "k", "K", "ki", "kb", "kib", "KiB", "m", "M", "mb", "MiB",
                        "mi", "g", "G", "gb", "GiB", "t", "T", "tb", "TiB", "ti", "x", "kk", "bi"])  # fmt: skip
# at most 15 digits: below 2**53 the publisher's float arithmetic was exact for whole numbers
NUMBER = st.integers(min_value=0, max_value=10**15 - 1).map(str)
DECIMAL = st.tuples(NUMBER, st.integers(min_value=0, max_value=999)).map(lambda p: f"{p[0]}.{p[1]}")
SIZES = st.builds(lambda a, n, b, u, c: f"{a}{n}{b}{u}{c}", SPACE, NUMBER | DECIMAL, SPACE, UNIT, SPACE)


@given(SIZES | st.text(max_size=12))
def test_union_of_the_old_grammars(text: str) -> None:
    a, b, got = old_collect(text), old_publish(text), new(text)
    if a is not None:
        assert got == a
    if b is not None:
        assert got == b
    if a is None and b is None:
        assert got is None


@given(st.integers(min_value=0, max_value=2**62))
def test_integers_pass_through(n: int) -> None:
    assert parse_size(n, "size") == n == old_collect(n)


@pytest.mark.parametrize(
    ("text", "want"),
    [("64MiB", 64 << 20), ("512KiB", 512 << 10), ("128M", 128 << 20), ("1G", 1 << 30), ("500000000", 500_000_000),
     ("1.5k", 1536), ("2t", 2 << 40), ("10 mb", 10 << 20), ("7b", 7), ("7ib", 7), ("3Ki", 3 << 10)],
)  # fmt: skip
def test_examples(text: str, want: int) -> None:
    assert parse_size(text, "size") == want


@pytest.mark.parametrize("value", ["lots", "", "-1", "1.5.2", "10 x", "1i", "1kk", -1, True, None])
def test_refused_with_the_name(value: Any) -> None:
    with pytest.raises(ConfigError, match=r"^bad --what "):
        parse_size(value, "--what")


def test_parse_duration() -> None:
    assert parse_duration("250ms") == 0.25
    assert parse_duration("5m") == 300.0
    assert parse_duration(2) == 2.0
    with pytest.raises(ConfigError, match="bad interval"):
        parse_duration("soon", "interval")
