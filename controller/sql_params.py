"""Client-side substitution of %(name)s parameters into ClickHouse SQL.

ClickHouse 18.16 has no server-side query parameters and chDB takes plain
text, so both store back ends render queries here.  Values are quoted as
ClickHouse literals; anything else is rejected.  Pure functions.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

_PARAM = re.compile(r"%\((\w+)\)s")
_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\0": "\\0"}


def quote(value: Any) -> str:
    """Render one Python value as a ClickHouse literal."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot quote non-finite float {value!r}")
        return repr(value)
    if isinstance(value, str):
        return "'" + "".join(_ESCAPES.get(ch, ch) for ch in value) + "'"
    if isinstance(value, bytes):
        return "unhex('" + value.hex() + "')"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return f"toDateTime('{value:%Y-%m-%d %H:%M:%S}', 'UTC')"
    if isinstance(value, dt.date):
        return f"toDate('{value:%Y-%m-%d}')"
    if isinstance(value, Sequence):
        return "[" + ", ".join(quote(v) for v in value) + "]"
    if hasattr(value, "item"):  # numpy scalar
        return quote(value.item())
    raise TypeError(f"cannot quote {type(value).__name__} as a ClickHouse literal")


def render(sql: str, params: Mapping[str, Any] | None) -> str:
    """Replace every %(name)s with the quoted value; a missing name is an error."""
    if not params:
        if _PARAM.search(sql):
            raise KeyError(f"query needs parameters {sorted(set(_PARAM.findall(sql)))}")
        return sql

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in params:
            raise KeyError(f"query parameter {name!r} not given")
        return quote(params[name])

    return _PARAM.sub(replace, sql)
