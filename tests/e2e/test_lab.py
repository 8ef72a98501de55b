"""`dyncc lab` end to end, short: real namespaces, tbf, transfers, collector, chDB, scoring,
publisher and the edge agent.  Slow (about 90 s) and root only."""

from __future__ import annotations

import datetime as dt
import io
import re
import secrets
import subprocess
from pathlib import Path

import pytest

from controller.lab import topology as lab_topology
from controller.lab.control import make_control_factory
from controller.lab.loop import ControlOutcome, Lab, LabOptions
from controller.lab.run import open_lab_store, summarize
from dyncc_common.runtime import StopFlag
from tests.support.netns_util import require_root

pytestmark = [pytest.mark.slow, pytest.mark.netns]


def _sh(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True).stdout


class Probe:
    """Wraps the real control step; after each round records what the edge really has."""

    def __init__(self, inner, topo):
        self.inner, self.topo = inner, topo
        self.routes: list[str] = []
        self.ss: list[str] = []

    def round(self, round_time: dt.datetime, round_no: int) -> ControlOutcome:
        out = self.inner.round(round_time, round_no)
        edge = self.topo.edge_ns
        self.routes.append(
            _sh("ip", "-n", edge, "route", "show", "proto", "250")
            + _sh("ip", "-n", edge, "-6", "route", "show", "proto", "250")
        )
        self.ss.append(_sh("ip", "netns", "exec", edge, "ss", "-tin", "state", "established"))
        return out

    def close(self) -> None:
        self.inner.close()


def _cc_by_peer(ss_text: str) -> dict[str, set[str]]:
    """peer address -> congestion controls of its sockets (from `ss -tin`)."""
    out: dict[str, set[str]] = {}
    peer = None
    for line in ss_text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and ":" in fields[-1] and not line.startswith("\t"):
            peer = fields[-1].rsplit(":", 1)[0].strip("[]").removeprefix("::ffff:")
        elif peer and fields and fields[0] in ("cubic", "bbr", "reno"):
            out.setdefault(peer, set()).add(fields[0])
    return out


def test_lab_selects_slow_prefixes_and_routes_them_to_bbr(chdb_url: str, tmp_path: Path):
    require_root()
    run_id = secrets.token_hex(3)
    opts = LabOptions(round_seconds=10, rounds=8, lookback_buckets=6, min_buckets=3, run_id=run_id)
    probes: list[Probe] = []
    real_factory = make_control_factory(tmp_path)

    def factory(store, topo, o):
        probes.append(Probe(real_factory(store, topo, o), topo))
        return probes[-1]

    out = io.StringIO()
    lab = Lab(opts, open_lab_store(chdb_url), factory, out=out)
    stop = StopFlag()
    result = lab.run(stop)
    summary = summarize(result)
    text = out.getvalue()
    topo = lab.topo
    slow = [c for c in topo.clients if c.profile == "slow"]
    fine = [c for c in topo.clients if c.profile == "fine"]

    # torn down: no namespace of this run (nor any process in it) is left
    assert result.leftover_namespaces == []
    assert not [n for n in lab_topology.lab_namespaces() if n.startswith(f"dlab-{run_id}")]
    assert len(result.rounds) == 8 and "round 8" in text

    # the consistently slow prefixes are selected, the fine ones are not
    last = result.rounds[-1].outcome
    for c in slow:
        assert last.scores[c.prefix].decision in ("select", "keep"), text
    for c in fine:
        assert last.scores.get(c.prefix) is None or last.scores[c.prefix].decision not in ("select", "keep")
    # ... and get congctl bbr routes (proto 250) on the edge, the fine ones do not
    routes = probes[0].routes[-1]
    for c in slow:
        assert re.search(rf"^{re.escape(c.prefix)} .*congctl bbr", routes, re.M), routes
    for c in fine:
        assert c.prefix not in routes
    # new connections from selected prefixes use bbr, fine prefixes stay on cubic
    ss = _cc_by_peer(probes[0].ss[-1])
    for c in slow:
        assert ss.get(c.addr) == {"bbr"} or (ss.get(c.addr) is None and summary.bbr_routed[0] > 0)
    for c in fine:
        assert "bbr" not in ss.get(c.addr, set())
    bbr, total = summary.bbr_routed
    assert total > 0 and bbr / total > 0.8
    assert summary.bbr_others[0] == 0 and summary.bbr_others[1] > 0
