"""Where a one-shot `dyncc collect` run spends its time: named moments, one debug line at the end.

`mark(name)` notes the monotonic clock (CLOCK_MONOTONIC, the clock a caller's
time.monotonic() reads too, so a benchmark can place the line against its own
start of the process); the first mark is taken when this module loads, at
the very start of the collect command.  `line()` is the moments in order:
the first as an absolute time in milliseconds, the others as offsets from it,
then the times `spent(name, ns)` adds up (waits).
A one-shot run logs it at debug level (-v) after its closing line.  Marks
are cheap and kept in memory only, at most MAX_MARKS of them.
Nothing here imports more than the standard library's time module.
"""

from __future__ import annotations

import time

#: a bound, so that marks taken by code a long-running collector also runs cost no memory
MAX_MARKS = 64
_marks: list[tuple[str, int]] = [("start", time.monotonic_ns())]
_spans: dict[str, int] = {}


def mark(name: str) -> None:
    """Note that `name` happened now (past MAX_MARKS moments, nothing more is noted)."""
    if len(_marks) < MAX_MARKS:
        _marks.append((name, time.monotonic_ns()))


def spent(name: str, ns: int) -> None:
    """Add `ns` nanoseconds to the time spent on `name` (e.g. waiting for the dump helper)."""
    _spans[name] = _spans.get(name, 0) + ns


def line() -> str:
    """`start=<monotonic ms> name=+<ms> ... name=<ms>ms ...`: the moments in order, then the times spent."""
    name0, t0 = _marks[0]
    parts = [f"{name0}={t0 / 1e6:.1f}"]
    parts.extend(f"{name}=+{(t - t0) / 1e6:.1f}" for name, t in _marks[1:])
    parts.extend(f"{name}={ns / 1e6:.1f}ms" for name, ns in _spans.items())
    return " ".join(parts)


def reset() -> None:
    """Start over (a new one-shot run in the same process, e.g. in tests)."""
    _marks[:] = [("start", time.monotonic_ns())]
    _spans.clear()
