"""The lab's live table: one row per client prefix per round (pure text rendering).

round 5  t=+100s  bucket 20s  selected 2/8  routes 2  bbr on new sockets: selected 100%, others 0%
prefix               shaping      buckets  duty  flap  decision  route  new sockets (cc)
198.51.100.0/24      slow               4  1.00  0.00  select    bbr    bbr 6
...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PrefixRow:
    prefix: str
    shaping: str  # slow | alternating (slow now / fast now) | fine
    counted_buckets: int | None  # None: not scored yet
    duty_cycle: float | None
    flap_ratio: float | None
    decision: str  # scoring decision, "" when not scored
    route: str  # congctl of the edge's owned route for the prefix, "" = none
    new_sockets: Mapping[str, int] = field(default_factory=dict)  # cc name -> new sockets this round


@dataclass(frozen=True)
class RoundHeader:
    round_no: int
    elapsed_s: float
    bucket_s: int
    selected: int
    prefixes: int
    routes: int
    bbr_share_selected: float | None
    bbr_share_others: float | None
    note: str = ""


def bbr_share(rows: Sequence[PrefixRow], selected: bool, routed: set[str] | None = None) -> float | None:
    """bbr share of new sockets over the rows with (selected=True) or without an owned bbr route."""
    bbr = total = 0
    for row in rows:
        has_route = row.route == "bbr" if routed is None else row.prefix in routed
        if has_route != selected:
            continue
        for cc, n in row.new_sockets.items():
            total += n
            if cc.startswith("bbr"):
                bbr += n
    return bbr / total if total else None


def _num(value: float | None, width: int, fmt: str = ".2f") -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}{fmt}}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.0f}%"


def format_cc(counts: Mapping[str, int]) -> str:
    if not counts:
        return "-"
    return " ".join(f"{cc or '?'} {n}" for cc, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


COLUMNS = (
    ("prefix", 22),
    ("shaping", 12),
    ("buckets", 7),
    ("duty", 5),
    ("flap", 5),
    ("decision", 10),
    ("route", 6),
    ("new sockets (cc)", 0),
)


def render(header: RoundHeader, rows: Sequence[PrefixRow]) -> str:
    """The table text for one round (no trailing newline)."""
    first = (
        f"round {header.round_no}  t=+{header.elapsed_s:.0f}s  bucket {header.bucket_s}s  "
        f"selected {header.selected}/{header.prefixes}  routes {header.routes}  "
        f"bbr on new sockets: routed {_pct(header.bbr_share_selected)}, "
        f"others {_pct(header.bbr_share_others)}"
    )
    lines = [first + (f"  ({header.note})" if header.note else "")]
    lines.append(" ".join(f"{name:<{w}}" if w else name for name, w in COLUMNS).rstrip())
    for r in rows:
        buckets = "-" if r.counted_buckets is None else str(r.counted_buckets)
        cells = [
            f"{r.prefix:<22}",
            f"{r.shaping:<12}",
            f"{buckets:>7}",
            _num(r.duty_cycle, 5),
            _num(r.flap_ratio, 5),
            f"{r.decision or '-':<10}",
            f"{r.route or '-':<6}",
            format_cc(r.new_sockets),
        ]
        lines.append(" ".join(cells).rstrip())
    return "\n".join(lines)
