"""Controller → Kafka → two real `dyncc agent` processes in their own edge namespaces.

A canary wave that fails its health gate is rolled back automatically: the canary
host's routes return to the previous state and the other host never installs the
bad state.  Then the kill switch removes every owned route on both hosts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from controller.rollout import records as rs
from controller.store import Store
from tests.support.netns_util import namespaces, new_ns_name, ns_sh, require_root, veth_pair
from tests.support.rollout_util import desired, make_keys, publish_round, publisher, run_control

pytestmark = [pytest.mark.kafka, pytest.mark.netns, pytest.mark.slow]

POP = "lax"
D1 = ["198.51.100.0/24", "2001:db8:0:100::/56"]
ADDED = ["203.0.113.0/24", "2001:db8:0:200::/56"]
D2 = D1 + ADDED
EDGES = {
    "edge-1": ("192.0.2.1/25", "192.0.2.2/25", "2001:db8:1::1/64", "2001:db8:1::2/64"),
    "edge-2": ("192.0.2.129/25", "192.0.2.130/25", "2001:db8:2::1/64", "2001:db8:2::2/64"),
}


def owned_routes(ns: str) -> dict[str, str]:
    """prefix -> congctl algorithm of the agent's routes (proto 250) in a namespace."""
    found: dict[str, str] = {}
    for family in ("-4", "-6"):
        out = ns_sh(ns, "ip", "-j", family, "route", "show", "proto", "250")
        for route in json.loads(out or "[]"):
            dst = route["dst"]
            if "/" not in dst:
                dst += "/32" if family == "-4" else "/128"
            metrics = {k: v for m in route.get("metrics", []) for k, v in m.items()}
            found[dst] = str(metrics.get("congestion", ""))
    return found


def wait_for(check: Callable[[], bool], what: str, timeout: float = 45.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def edges() -> Iterator[dict[str, str]]:
    """A router namespace and two edge namespaces whose default routes (congctl cubic) go via it."""
    require_root()
    router = new_ns_name("de2r")
    names = {host: new_ns_name("de2e") for host in EDGES}
    with namespaces([router, *names.values()]):
        for host, (r4, e4, r6, e6) in EDGES.items():
            ns = names[host]
            veth_pair(router, f"to-{host}", ns, "uplink")
            ns_sh(router, "ip", "addr", "add", r4, "dev", f"to-{host}")
            ns_sh(router, "ip", "-6", "addr", "add", r6, "dev", f"to-{host}", "nodad")
            ns_sh(ns, "ip", "addr", "add", e4, "dev", "uplink")
            ns_sh(ns, "ip", "-6", "addr", "add", e6, "dev", "uplink", "nodad")
            ns_sh(ns, "ip", "route", "add", "default", "via", r4.split("/")[0], "congctl", "cubic")
            ns_sh(ns, "ip", "-6", "route", "add", "default", "via", r6.split("/")[0], "congctl", "cubic")
        yield names


def test_failed_canary_rolls_back_and_kill_switch_clears(
    edges: dict[str, str], store: Store, store_url: str, kafka_brokers: str, kafka_topic: str, tmp_path: Path
) -> None:
    private, public = make_keys(tmp_path)
    cfg_topic, status_topic = f"{kafka_topic}_cfg", f"{kafka_topic}_st"
    base = [
        "--kafka",
        kafka_brokers,
        "--config-topic",
        cfg_topic,
        "--status-topic",
        status_topic,
        "--key",
        str(private),
    ]
    # The canary's health gate cannot pass: no host has a petabyte of free memory.
    pub = publisher(
        store,
        [
            *base,
            "--canary-hosts",
            f"{POP}:edge-1",
            "--soak",
            "1s",
            "--wave-timeout",
            "60s",
            "--min-mem-available",
            "1000000G",
        ],
    )

    agents: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for host, ns in edges.items():
            log = open(tmp_path / f"{host}.log", "wb")  # noqa: SIM115 - closed in finally
            logs.append(log)
            agents.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "dyncc.cli",
                        "agent",
                        "--kafka",
                        kafka_brokers,
                        "--pop",
                        POP,
                        "--host",
                        host,
                        "--netns",
                        ns,
                        "--public-key",
                        str(public),
                        "--config-topic",
                        cfg_topic,
                        "--status-topic",
                        status_topic,
                        "--state-dir",
                        str(tmp_path / f"state-{host}"),
                        "--reconcile-every",
                        "5s",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**os.environ},
                )
            )

        # v1: D1 to the whole POP; both agents install it.
        publish_round(pub, [desired(POP, D1)])
        for host, ns in edges.items():
            wait_for(lambda ns=ns: set(owned_routes(ns)) == set(D1), f"{host} to install D1")  # type: ignore[misc]
        assert set(owned_routes(edges["edge-1"]).values()) == {"bbr"}

        # Let the controller learn both hosts from their status reports, then stage D2.
        def canary_started() -> bool:
            publish_round(pub, [desired(POP, D2)])
            return rs.load_state(store, POP).phase == "canary"

        wait_for(canary_started, "the canary wave to start")
        assert rs.load_state(store, POP).wave_hosts == ("edge-1",)
        wait_for(lambda: set(owned_routes(edges["edge-1"])) == set(D2), "the canary host to install D2")
        assert set(owned_routes(edges["edge-2"])) == set(D1), "the rest of the POP got the canary wave"

        # The gate fails on health: the controller rolls the wave back.
        def rolled_back() -> bool:
            publish_round(pub, [desired(POP, D2)])
            assert set(owned_routes(edges["edge-2"])) == set(D1), "the rest of the POP got the bad state"
            return rs.load_state(store, POP).phase != "canary"

        wait_for(rolled_back, "the canary wave to be rolled back")
        wait_for(lambda: set(owned_routes(edges["edge-1"])) == set(D1), "the canary host to return to D1")
        assert set(owned_routes(edges["edge-2"])) == set(D1)
        rows = store.query_rows("SELECT DISTINCT host FROM apply_status")
        assert {r[0] for r in rows} == {"edge-1", "edge-2"}

        # Kill switch: every owned route goes on both hosts.
        assert run_control([*base, "kill-switch", "--pop", POP, "--clickhouse", store_url]) == 0
        for host, ns in edges.items():
            wait_for(lambda ns=ns: owned_routes(ns) == {}, f"{host} to remove every owned route")  # type: ignore[misc]
            # The covering default routes (not ours) are untouched.
            assert "via" in ns_sh(ns, "ip", "route", "show", "default")
    finally:
        for agent in agents:
            agent.send_signal(signal.SIGTERM)
        for agent in agents:
            try:
                agent.wait(15)
            except subprocess.TimeoutExpired:
                agent.kill()
        for log in logs:
            log.close()
    for agent in agents:
        assert agent.returncode == 0, (tmp_path / "edge-1.log").read_text()[-2000:]
