"""Durations and sizes as people write them in flags and TOML (pure, stdlib only).

    parse_duration("250ms" | "10s" | "5m" | "1h" | "1d" | 2.5) -> seconds (float); bare numbers are seconds
    parse_size("64MiB" | "512KiB" | "128M" | "1.5G" | "1t" | 4096) -> bytes (int)

Sizes are binary (k = 2**10, m = 2**20, g = 2**30, t = 2**40) and case-insensitive: "64MiB",
"64mb", "64M" are the same; a bare number, or one followed by "b" / "ib", is bytes; a decimal
point is allowed ("1.5G"; the byte count is truncated).  The grammar is exactly the union of
the two the collector and the publisher used to have (so "64Mi" is accepted, a whole-number
form only the collector knew, and "1.5G" / "2T", which only the publisher knew), and every
string either accepted parses to the same number as before (whole numbers exactly, also past
2**53 where the publisher's float lost precision).  The one difference: a negative or
boolean integer (from TOML) is refused everywhere; the publisher passed it through.  Bad input is a
ConfigError naming `what`.
"""

from __future__ import annotations

import re

from dyncc_common.errors import ConfigError

__all__ = ["parse_duration", "parse_size"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}

# Exactly the union of the two old grammars: whole numbers take k/m/g followed by i?b?, or t
# followed by (i?b)?; decimals take k/m/g/t followed by (i?b)?; either may end in "b" or "ib".
_SIZE = re.compile(
    r"^\s*(?:(\d+)\s*(?:([kmg])i?b?|(t)(?:i?b)?|i?b)?|(\d+\.\d+)\s*(?:([kmgt])(?:i?b)?|i?b)?)\s*$",
    re.IGNORECASE,
)
_SCALE = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_duration(text: str | float | int, what: str = "duration") -> float:
    """'10s' -> 10.0, '5m' -> 300.0, '250ms' -> 0.25; bare numbers are seconds."""
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        match = _DURATION.match(text)
        if not match:
            raise ConfigError(f"bad {what} {text!r}: use e.g. 250ms, 10s, 5m, 1h")
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds < 0:
        raise ConfigError(f"bad {what} {text!r}: must not be negative")
    return seconds


def parse_size(value: object, what: str) -> int:
    """'64MiB' -> 67108864, '1.5k' -> 1536, 4096 -> 4096; ConfigError for anything else."""
    if isinstance(value, bool):
        raise ConfigError(f"bad {what} {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"bad {what} {value!r}: must not be negative")
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ConfigError(f"bad {what} {value!r}: use bytes or e.g. 64MiB, 512KiB, 128M, 1.5G")
    whole, letter, tera, decimal, dec_letter = match.groups()
    unit = (letter or tera or dec_letter or "").lower()
    scale = _SCALE[unit] if unit else 1
    if decimal:  # the publisher's rule for decimals: int(float * scale), truncated
        return int(float(decimal) * scale)
    return int(whole) * scale
