"""One rollout step may save the POP's state twice on one clock reading (a wave completes and the
next canary starts in the same round; the lab's publisher runs on the round's clock): the second
row is the state.  Before, both rows carried the same updated_ns and the latest-row read
(sql/queries/rollout_state_latest.sql) could return the completed wave: the next round saw the
POP idle and published over the canary in flight.  Real store (ClickHouse 18.16, chDB), real
Publisher to a directory, agents' reports as stored ApplyStatus rows."""

from __future__ import annotations

import time
from pathlib import Path

from controller.rollout import records as rs
from controller.rollout.publish import Publisher
from controller.rollout.settings import RolloutSettings
from controller.rollout.statuses import insert_status_rows, status_row
from controller.store import Store
from tests.support.rollout_util import desired, make_keys, publish_round, status

HOSTS = ("edge-1", "edge-2")
D1 = ["192.0.2.0/24", "198.51.100.0/24"]
ADDED = ["203.0.113.0/24"]
S = 10**9


def test_a_canary_started_as_a_wave_completes_is_the_state(store: Store, tmp_path: Path) -> None:
    private, _public = make_keys(tmp_path)
    now = [time.time_ns()]
    cfg = RolloutSettings(
        publish_dir=tmp_path / "cfg", private_key=private, staging="on", hosts=(f"lax:{','.join(HOSTS)}",),
        canary_hosts=("lax:edge-1",), soak=1.0, wave_timeout=60.0, host_expiry=3600.0,
    )  # fmt: skip
    publisher = Publisher(store, cfg, clock=lambda: now[0])

    def report(version: int, *hosts: str) -> None:
        rows = []
        for host in hosts:
            st = status(host, version, version)
            st.reported_at_ns = now[0] + S // 10
            rows.append(status_row(st, received_ns=now[0] + S // 10))
        insert_status_rows(store, [r for r in rows if r is not None])

    publish_round(publisher, [desired("lax", D1)])
    assert (rs.load_state(store, "lax").phase, rs.last_version(store, "lax")) == ("canary", 1)
    report(1, "edge-1")
    now[0] += 2 * S  # soaked
    publish_round(publisher, [desired("lax", D1)])
    assert rs.load_state(store, "lax").phase == "rest"
    report(2, *HOSTS)
    now[0] += 2 * S
    # one step: the rest wave of v2 completes, then the new prefix's canary v3 starts
    publish_round(publisher, [desired("lax", D1 + ADDED)])
    events = store.query_rows("SELECT event, updated_ns FROM rollout_waves WHERE pop = 'lax' ORDER BY updated_ns")
    assert [str(e) for e, _ in events][-2:] == ["complete", "canary"], events
    stamps = [int(ns) for _, ns in events]
    assert len(set(stamps)) == len(stamps), events  # the read of the latest row is never a tie
    state = rs.load_state(store, "lax")
    assert (state.phase, state.wave_version, state.wave_hosts) == ("canary", 3, ("edge-1",))
    # the next round finds the canary in flight (its host not reported yet): nothing is published
    now[0] += S
    publish_round(publisher, [desired("lax", D1 + ADDED)])
    assert (rs.load_state(store, "lax").phase, rs.last_version(store, "lax")) == ("canary", 3)
