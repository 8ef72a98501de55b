"""App-limited samples from the kernel to the scoring: a real app-limited flow and a bulk flow.

Two namespaces joined by a veth (the server's side shaped to 40 Mbit/s so the bulk flow does not
burn a core): the server writes 20 KB every 50 ms to a client at 198.51.100.2 (the slow flow: it
has no more to send, so tcp_rate.c marks its rate samples app-limited) and as fast as the path
takes to a client at 2001:db8:da1::2 (the bulk flow).  The collector (the library entry point, as
`dyncc collect --once` runs it) polls the server's namespace several times; the kernel's flag
comes out in `app_limited`: mostly 1 for the slow flow, mostly 0 for the bulk one.  The batches
go through the ingest writer into a store, and the scoring (rollup and raw paths) leaves the
slow flow's app-limited samples out by default and counts them with include_app_limited.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import pytest

from collector.telemetry.poller import Poller, PollerConfig
from controller.ingest.writer import BatchWriter
from controller.scoring.query import refresh, score_prefixes, window_for
from controller.scoring.settings import ScoringSettings
from controller.store import Store
from schemas.tcpinfo_decode import decode_batch
from tests.support.netns_util import namespaces, new_ns_name, ns_sh, require_root, start_ready, veth_pair

pytestmark = pytest.mark.netns
POP = "dal"
SLOW = ("198.51.100.1", 8081, "198.51.100.2", "198.51.100.0/24")  # server, port, client, client prefix
BULK = ("2001:db8:da1::1", 8082, "2001:db8:da1::2", "2001:db8:da1::/56")
POLLS = 12
POLL_EVERY = 0.15  # s
QUALIFYING = 102_400  # bytes_acked above this: a qualifying flow (ScoringSettings.min_bytes)


@dataclass(frozen=True)
class Sample:
    port: int  # the server's port: which flow
    app_limited: int
    bytes_acked: int
    delivery_rate: int


@dataclass
class Collected:
    batches: list[bytes]
    samples: list[Sample]

    def flow(self, port: int) -> list[Sample]:
        return [s for s in self.samples if s.port == port]


def _start(ns: str, *args: str) -> subprocess.Popen[str]:
    return start_ready(ns, "tests.support.app_limited_flows", *args)


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _samples(batch: bytes) -> list[Sample]:
    b = decode_batch(batch)
    c = b.columns
    return [
        Sample(int(port), int(flag), int(acked), int(rate))
        for port, flag, acked, rate in zip(
            c["src_port"], c["app_limited"], c["bytes_acked"], c["delivery_rate"], strict=True
        )
        if int(port) in (SLOW[1], BULK[1])
    ]


@pytest.fixture(scope="module")
def collected() -> Iterator[Collected]:
    require_root()
    server, client = new_ns_name("dal-s"), new_ns_name("dal-c")
    with namespaces([server, client]):
        veth_pair(server, "eth0", client, "eth0")
        for ns, v4, v6 in ((server, SLOW[0], BULK[0]), (client, SLOW[2], BULK[2])):
            ns_sh(ns, "ip", "addr", "add", f"{v4}/24", "dev", "eth0")
            ns_sh(ns, "ip", "-6", "addr", "add", f"{v6}/64", "dev", "eth0", "nodad")
        ns_sh(server, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", "40mbit", "burst", "64kb",
              "latency", "100ms")  # fmt: skip
        procs = [_start(server, "serve", f"slow,{SLOW[0]},{SLOW[1]}", f"bulk,{BULK[0]},{BULK[1]}")]
        try:
            procs.append(_start(client, "connect", f"{SLOW[0]},{SLOW[1]}", f"{BULK[0]},{BULK[1]}"))
            time.sleep(1.0)  # the slow flow passes 100 KB acknowledged after ~0.25 s
            poller = Poller(PollerConfig(host="dal-edge", pop=POP, netns=(server,)))
            batches: list[bytes] = []
            for _ in range(POLLS):
                batches.extend(poller.poll().batches)
                time.sleep(POLL_EVERY)
        finally:
            _stop(procs)
        yield Collected(batches, [s for b in batches for s in _samples(b)])


def test_the_kernel_flags_the_slow_flow_app_limited(collected: Collected) -> None:
    slow, bulk = collected.flow(SLOW[1]), collected.flow(BULK[1])
    assert len(slow) == len(bulk) == POLLS  # one sample of each flow per poll
    assert all(s.bytes_acked > QUALIFYING for s in slow + bulk)  # both qualify
    flagged_slow = sum(s.app_limited for s in slow)
    flagged_bulk = sum(s.app_limited for s in bulk)
    print(f"app-limited samples: slow flow {flagged_slow}/{len(slow)}, bulk flow {flagged_bulk}/{len(bulk)}")
    assert flagged_slow >= 0.75 * POLLS
    assert flagged_bulk <= 0.25 * POLLS
    assert max(s.bytes_acked for s in bulk) > 4 * max(s.bytes_acked for s in slow)


def test_the_scoring_leaves_the_app_limited_samples_out(collected: Collected, store: Store) -> None:
    BatchWriter(store).write(collected.batches)
    now = dt.datetime.fromtimestamp(time.time() // 300 * 300 + 300, dt.UTC)  # a round after the samples' bucket
    expected = {}
    for port, prefix in ((SLOW[1], SLOW[3]), (BULK[1], BULK[3])):
        flow = collected.flow(port)
        qualifying = np.array([s.bytes_acked > QUALIFYING for s in flow])
        flagged = np.array([s.app_limited != 0 for s in flow])
        expected[prefix] = (len(flow), int((qualifying & ~flagged).sum()), int(qualifying.sum()))
    # the rollup path (5-minute buckets) and the raw path (1-minute buckets)
    for cfg in (ScoringSettings(), ScoringSettings(bucket_seconds=60, lookback_seconds=3600)):
        for version, include in enumerate((False, True), start=1):
            mode = replace(cfg, include_app_limited=include)
            window = window_for(now, mode)
            keys = refresh(store, mode, window, POP, version)
            scores = score_prefixes(store, mode, window, POP, keys)
            got = {
                str(p): (int(n), int(q))
                for p, n, q in zip(scores["prefix"], scores["samples"], scores["qualifying"], strict=True)
            }
            want = {p: (n, every if include else nal) for p, (n, nal, every) in expected.items()}
            assert got == want, (mode.source, got, want)
    slow_samples, slow_nal, slow_all = expected[SLOW[3]]
    assert slow_all == slow_samples and slow_nal <= 0.25 * slow_samples  # mostly left out by default
