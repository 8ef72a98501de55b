"""Reading plot geometry back out of an SVG the report wrote."""

from __future__ import annotations

import re


def path_points(svg: str, gid: str) -> int:
    """Number of vertices drawn for the element with this id (M and L commands of its path)."""
    m = re.search(rf'<g id="{re.escape(gid)}">\s*<path d="([^"]*)"', svg)
    assert m, f"no path for {gid}"
    return len(re.findall(r"[ML]", m.group(1)))
