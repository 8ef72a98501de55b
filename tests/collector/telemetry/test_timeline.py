"""The one-shot run's timeline: moments in order as offsets from the first, then the times spent."""

from __future__ import annotations

import re
import time

from collector.telemetry import timeline


def test_line_lists_moments_in_order_then_spans() -> None:
    timeline.reset()
    try:
        timeline.mark("a")
        time.sleep(0.01)
        timeline.mark("b")
        timeline.spent("wait", 2_500_000)
        timeline.spent("wait", 500_000)
        line = timeline.line()
        m = re.fullmatch(r"start=([\d.]+) a=\+([\d.]+) b=\+([\d.]+) wait=([\d.]+)ms", line)
        assert m, line
        start, a, b, wait = (float(x) for x in m.groups())
        assert abs(start - time.monotonic_ns() / 1e6) < 10_000  # the monotonic clock, in ms
        assert 0 <= a < b and b - a >= 9.0
        assert wait == 3.0
    finally:
        timeline.reset()
    assert timeline.line().startswith("start=") and " " not in timeline.line()
