"""The lab's live table: one row per (POP, path class) per round (pure text rendering).

round 5  t=+75s  bucket 15s  on bbr 18/128  holdout 6  configs: lab-a published v2; lab-b held v1
pop    class        prefixes scored select trial keep holdout revert skip  bbr routes (per host)  new sockets bbr
lab-a  lossy              10     10      0     4    3       3      0    0  5 5                    41/52 (79%)
...
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from controller.store.decisions import HOLDOUT, KEEP, REVERT, SELECT, SKIP, TRIAL

DECISIONS = (SELECT, TRIAL, KEEP, HOLDOUT, REVERT, SKIP)


@dataclass
class ClassRow:
    pop: str
    klass: str
    prefixes: int = 0
    scored: int = 0
    decisions: Counter[str] = field(default_factory=Counter)
    routes: list[int] = field(default_factory=list)  # per edge host of the POP: prefixes with a bbr route
    new_sockets: Counter[str] = field(default_factory=Counter)  # cc -> new sockets this round


@dataclass(frozen=True)
class RoundHeader:
    round_no: int
    elapsed_s: float
    bucket_s: int
    on_bbr: int
    prefixes: int
    holdout: int
    note: str = ""


def bbr_count(counts: Mapping[str, int]) -> tuple[int, int]:
    """(bbr, total) of a cc -> count mapping."""
    return sum(n for cc, n in counts.items() if cc.startswith("bbr")), sum(counts.values())


def _share(counts: Mapping[str, int]) -> str:
    bbr, total = bbr_count(counts)
    return f"{bbr}/{total} ({bbr / total * 100:.0f}%)" if total else "-"


COLUMNS = (
    ("pop", 7),
    ("class", 12),
    ("prefixes", 8),
    ("scored", 6),
    *((d, max(len(d), 4)) for d in DECISIONS),
    ("bbr routes/host", 16),
    ("new sockets on bbr", 0),
)


def render(header: RoundHeader, rows: Sequence[ClassRow]) -> str:
    """The table text for one round (no trailing newline)."""
    first = (
        f"round {header.round_no}  t=+{header.elapsed_s:.0f}s  bucket {header.bucket_s}s  "
        f"on bbr {header.on_bbr}/{header.prefixes}  holdout {header.holdout}"
    )
    lines = [first + (f"  ({header.note})" if header.note else "")]
    lines.append(" ".join(f"{name:<{w}}" if w else name for name, w in COLUMNS).rstrip())
    for r in rows:
        cells = [f"{r.pop:<7}", f"{r.klass:<12}", f"{r.prefixes:>8}", f"{r.scored:>6}"]
        cells += [f"{r.decisions.get(d, 0):>{max(len(d), 4)}}" for d in DECISIONS]
        cells.append(f"{' '.join(str(n) for n in r.routes) or '-':<16}")
        cells.append(_share(r.new_sockets))
        lines.append(" ".join(cells).rstrip())
    return "\n".join(lines)
