"""The lab's in-run ground truth (dyncc/lab/truth.py) and its poll accounting (dyncc/lab/loop.py,
dyncc/lab/run.py polling_line): the pure parts."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import Counter

import pytest

from controller.evidence.model import BBR, CUBIC, Effect, none
from dyncc.lab import topology as lab_topology
from dyncc.lab.loop import LabResult, PollThread, RoundRecord, starved_rounds
from dyncc.lab.model import ControlOutcome
from dyncc.lab.run import polling_line
from dyncc.lab.table import RoundHeader
from dyncc.lab.truth import (
    BLOCK_ROUNDS,
    REFERENCE_PROTO,
    parse_routes,
    pick_references,
    reference_arm,
    route_batch,
    truth_lines,
)


def test_one_reference_per_pop_and_class_of_three_or_more_with_opposite_phases() -> None:
    layout = lab_topology.Layout(lowrtt=2)
    topo = lab_topology.describe("ab12", layout)
    refs = pick_references(topo)
    assert Counter(r.pop for r in refs) == {"lab-a": 4, "lab-b": 4}
    assert {r.klass for r in refs} == {"lossy", "deep", "alternating", "fine"}  # 2 low-RTT ones: none
    for r in refs:
        mine = [p for p in topo.prefixes if p.pop == r.pop and p.klass == r.klass]
        assert r.prefix == mine[-1].prefix
    assert {r.phase for r in refs if r.pop == "lab-a"} == {0} and {r.phase for r in refs if r.pop == "lab-b"} == {1}
    assert pick_references(topo, enabled=False) == []


def test_arms_switch_every_block_and_the_pops_are_on_opposite_arms() -> None:
    topo = lab_topology.describe("ab12")
    a, b = (next(r for r in pick_references(topo) if r.pop == pop and r.klass == "lossy") for pop in topo.pops)
    arms_a = [reference_arm(a, n) for n in range(1, 9)]
    assert BLOCK_ROUNDS == 2 and arms_a == [BBR, BBR, CUBIC, CUBIC, BBR, BBR, CUBIC, CUBIC]
    assert all(reference_arm(b, n) != arm for n, arm in enumerate(arms_a, start=1))


def test_route_batch_puts_only_the_pops_references_on_their_arm_through_its_gateway() -> None:
    topo = lab_topology.describe("ab12")
    refs = pick_references(topo)
    edge = topo.edges_of("lab-b")[1]
    lines = route_batch(refs, edge, 3)
    mine = [r for r in refs if r.pop == "lab-b"]
    assert len(lines) == len(mine)
    for r, line in zip(mine, lines, strict=True):
        via = edge.link.router_v4 if r.family == 4 else edge.link.router_v6
        arm = reference_arm(r, 3)
        assert line == f"route replace {r.prefix} via {via} dev eth0 proto {REFERENCE_PROTO} congctl {arm}"


def test_parse_routes_reads_both_families_and_locked_congctl() -> None:
    text = (
        "198.51.100.0/24 via 192.0.2.1 dev eth0 proto 251 congctl bbr \n"
        "2001:db8:1100:ff00::/56 via 2001:db8:ff00::1 dev eth0 proto 251 metric 1024 congctl lock cubic pref medium\n"
        "2001:db8:1200:100::/56 via 2001:db8:ff00::1 dev eth0 proto 251 metric 1024 pref medium\n"
        "garbage line\n"
    )
    assert parse_routes(text) == {
        "198.51.100.0/24": "bbr",
        "2001:db8:1100:ff00::/56": "cubic",
        "2001:db8:1200:100::/56": "",
    }


def test_truth_lines_show_interval_prefixes_and_samples_or_why_not() -> None:
    topo = lab_topology.describe("ab12")
    refs = pick_references(topo)
    effect = Effect(0.5, 0.2, 0.9, 0.9, 0.405, 0.1, 2, 2, 1234, prefixes=2)
    lines = truth_lines({"lossy": effect, "deep": none("too few realized pairs", samples=40)}, refs, failures=1)
    assert "10 reference prefixes" in lines[0]
    assert lines[1] == "  truth lossy        +50% [+20%, +90%], 2 prefixes, 1,234 samples"
    assert lines[2] == "  truth deep         n/a: too few realized pairs (40 samples)"
    assert "1 reference buckets left out" in lines[-1]
    assert truth_lines({}, [])[0].startswith("ground truth: no references")


def _result(polls: list[int], planned: int = 30) -> LabResult:
    topo = lab_topology.describe("ab12")
    t = dt.datetime(2026, 12, 6, tzinfo=dt.UTC)
    rounds = [
        RoundRecord(n, t, RoundHeader(n, 0.0, 15, 0, 0, 0, ""), [], ControlOutcome({}, {}, ""), {}, p)
        for n, p in enumerate(polls, start=1)
    ]
    return LabResult(topo, rounds=rounds, planned_polls=planned)


def test_polling_line_says_when_a_quarter_of_the_buckets_were_starved() -> None:
    quiet = _result([30, 29, 30, 28, 12])
    assert starved_rounds(quiet) == [5]
    assert polling_line(quiet) == "polls per bucket: median 29 [12, 30] of 30 planned; 1 starved buckets"
    busy = _result([30, 10, 12, 29])
    assert starved_rounds(busy) == [2, 3]
    line = polling_line(busy)
    assert line.startswith("polls per bucket: median 20.5 [10, 30] of 30 planned; STARVED: 2 of 4 buckets")
    assert polling_line(_result([])) == ""


class _Pipeline:
    def __init__(self, fail_at: int = 0) -> None:
        self.polls, self.fail_at = 0, fail_at
        self.threads: set[str] = set()

    def poll(self) -> None:
        self.threads.add(threading.current_thread().name)
        self.polls += 1
        if self.polls == self.fail_at:
            raise OSError("netlink gone")


def test_poll_thread_polls_on_its_own_and_hands_a_failure_to_the_lab() -> None:
    p = _Pipeline()
    t = PollThread(p, 0.01)  # type: ignore[arg-type]
    t.start()
    time.sleep(0.3)
    t.check()
    t.stop()
    n = p.polls
    assert n >= 5 and p.threads == {"lab-poll"}
    time.sleep(0.05)
    assert p.polls == n  # stopped
    bad = _Pipeline(fail_at=3)
    t = PollThread(bad, 0.01)  # type: ignore[arg-type]
    t.start()
    time.sleep(0.2)
    with pytest.raises(OSError, match="netlink gone"):
        t.check()
    t.stop()
    assert bad.polls == 3
