"""Expand version-dependent markers in dyncc's .sql files.

One set of .sql files serves ClickHouse 18.16 and chDB 26.x.  Features newer
than 18.16 are written as markers that expand to nothing on old servers:

    {{lowcard(String)}}          LowCardinality(String)  (>= 19.1), else String
    {{codec(Delta, ZSTD(1))}}    CODEC(Delta, ZSTD(1))   (>= 19.10), else ''
    {{ttl(time + INTERVAL 1 DAY)}} TTL time + INTERVAL 1 DAY (>= 19.6), else ''
    {{ipv6(FixedString(16))}}    IPv6 (>= 19.3), else the argument

Retention TTLs delete rows older than the interval at insert and merge time;
a store URL with ttl=off creates tables without them.

Pure functions; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable

Version = tuple[int, ...]

_MARKER = re.compile(r"\{\{\s*(\w+)\((.*?)\)\s*\}\}", re.DOTALL)

LOWCARD_SINCE: Version = (19, 1)
CODEC_SINCE: Version = (19, 10)
TTL_SINCE: Version = (19, 6)
IPV6_SINCE: Version = (19, 3)


def parse_version(text: str) -> Version:
    """'18.16.1' or '26.9.2.1' -> (18, 16, 1) / (26, 9, 2, 1)."""
    parts = []
    for piece in text.strip().split("."):
        digits = re.match(r"\d+", piece)
        if not digits:
            break
        parts.append(int(digits.group(0)))
    if not parts:
        raise ValueError(f"not a ClickHouse version: {text!r}")
    return tuple(parts)


def _expanders(version: Version, ttl: bool) -> dict[str, Callable[[str], str]]:
    return {
        "lowcard": lambda arg: f"LowCardinality({arg})" if version >= LOWCARD_SINCE else arg,
        "codec": lambda arg: f"CODEC({arg})" if version >= CODEC_SINCE else "",
        "ttl": lambda arg: f"TTL {arg}" if ttl and version >= TTL_SINCE else "",
        "ipv6": lambda arg: "IPv6" if version >= IPV6_SINCE else arg,
    }


def render(sql: str, version: Version, ttl: bool = True) -> str:
    """Expand every {{marker(arg)}} for a server of `version`.

    ttl=False leaves retention TTLs out (store URL option ttl=off), for stores
    that hold historic data on purpose: replays and tests with fixed dates.
    """
    expanders = _expanders(version, ttl)

    def replace(match: re.Match[str]) -> str:
        name, arg = match.group(1), match.group(2).strip()
        if name not in expanders:
            raise ValueError(f"unknown SQL template marker {{{{{name}(...)}}}}")
        return expanders[name](arg)

    return _MARKER.sub(replace, sql)


def split_statements(sql: str) -> list[str]:
    """Split a .sql file into statements on ';' at end of line; drop comments-only chunks."""
    statements = []
    for chunk in re.split(r";\s*(?:\n|$)", sql):
        lines = [ln for ln in chunk.splitlines() if not ln.strip().startswith("--")]
        body = "\n".join(lines).strip()
        if body:
            statements.append(body)
    return statements
