"""The kinds of a setting's value and the validators of the settings model (dyncc_common.settings).

A kind names how a value is written and parsed: str int float bool duration size path table.
`parse_value(kind, raw, what)` reads one value from a flag (a string), TOML (typed) or code
(already typed), a ConfigError with a one-line reason otherwise; `format_value(kind, value)`
writes a parsed value back as a person would (durations and sizes go through
dyncc_common.units).  `in_range` and `at_least` are the shared row validators.  Stdlib only at
import: pathlib is imported when a path is parsed (`dyncc collect --once` start-up is measured).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dyncc_common import units
from dyncc_common.errors import ConfigError

__all__ = [
    "BOOL",
    "DURATION",
    "FLOAT",
    "INT",
    "KINDS",
    "PATH",
    "SIZE",
    "STR",
    "TABLE",
    "Validator",
    "at_least",
    "format_value",
    "in_range",
    "parse_value",
]

STR = "str"
INT = "int"
FLOAT = "float"
BOOL = "bool"
DURATION = "duration"
SIZE = "size"
PATH = "path"
TABLE = "table"
KINDS = (STR, INT, FLOAT, BOOL, DURATION, SIZE, PATH, TABLE)

Validator = Callable[[Any, str], Any]  # (value, what) -> value, or ConfigError naming `what`


def _bad(what: str, raw: Any, expected: str) -> ConfigError:
    return ConfigError(f"bad {what} {raw!r}: must be {expected}")


def parse_value(kind: str, raw: Any, what: str) -> Any:
    """One value of `kind` from a flag (a string), TOML (typed) or code (already typed)."""
    if kind == BOOL:
        if isinstance(raw, bool):
            return raw
        raise _bad(what, raw, "true or false")
    if isinstance(raw, bool) or (kind != TABLE and isinstance(raw, dict | list | tuple)):
        raise _bad(what, raw, _EXPECTED[kind])
    if kind == STR:
        if isinstance(raw, str | int | float):
            return str(raw)  # TOML may write a name as a bare number
    elif kind == INT:
        if isinstance(raw, int):
            return raw
        if isinstance(raw, str):
            try:
                return int(raw.strip())
            except ValueError:
                pass
    elif kind == FLOAT:
        if isinstance(raw, int | float):
            return float(raw)
        if isinstance(raw, str):
            try:
                return float(raw.strip())
            except ValueError:
                pass
    elif kind == DURATION:
        if isinstance(raw, str | int | float):
            return units.parse_duration(raw, what)
    elif kind == SIZE:
        if isinstance(raw, int):
            return units.parse_size(raw, what)
        if isinstance(raw, str | float):
            return units.parse_size(str(raw), what)
    elif kind == PATH:
        import pathlib

        if isinstance(raw, str | pathlib.PurePath) and str(raw):
            return pathlib.Path(raw)
    elif kind == TABLE:
        if isinstance(raw, dict):
            return dict(raw)
    else:
        raise TypeError(f"setting kind {kind!r}: use one of {', '.join(KINDS)}")
    raise _bad(what, raw, _EXPECTED[kind])


_EXPECTED = {
    STR: "a string",
    INT: "an integer",
    FLOAT: "a number",
    BOOL: "true or false",
    DURATION: "a duration such as 250ms, 10s, 5m, 1h",
    SIZE: "a size such as 4096, 512KiB, 64MiB",
    PATH: "a path",
    TABLE: "a table",
}

_DURATION_UNITS = (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0), ("ms", 0.001))
_SIZE_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def format_value(kind: str, value: Any) -> str:
    """A parsed value written back as a person would (parse_value gives the same value again)."""
    if kind == DURATION:
        seconds = float(value)
        for unit, scale in _DURATION_UNITS:
            n = seconds / scale
            if n >= 1 and n == int(n) and float(int(n)) * scale == seconds:
                return f"{int(n)}{unit}"
        from decimal import Decimal

        return f"{Decimal(repr(seconds)):f}s"  # positional, never "1e-05"
    if kind == SIZE:
        size = int(value)
        for unit, scale in _SIZE_UNITS:
            if size >= scale and size % scale == 0:
                return f"{size // scale}{unit}"
        return str(size)
    if kind == BOOL:
        return "true" if value else "false"
    return str(value)


# ---- validators ----------------------------------------------------------------------------


def in_range(lo: float | None = None, hi: float | None = None) -> Validator:
    """value within [lo, hi] (either end open when None)."""

    def check(value: Any, what: str) -> Any:
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            if lo is not None and hi is not None:
                raise ConfigError(f"bad {what} {value!r}: must be between {_num(lo)} and {_num(hi)}")
            bound = f"at least {_num(lo)}" if lo is not None else f"at most {_num(hi)}"
            raise ConfigError(f"bad {what} {value!r}: must be {bound}")
        return value

    return check


def _num(x: float | None) -> str:
    return str(int(x)) if isinstance(x, int) or (isinstance(x, float) and x.is_integer()) else f"{x:g}"


def at_least(lo: float) -> Validator:
    return in_range(lo, None)
