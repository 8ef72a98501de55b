"""Route mode's lingering BBR connections (collector/agent/lingering.py) in a real namespace.

Connections opened with TCP_CONGESTION bbr and cubic inside a network namespace of the test's
own (loopback, documentation addresses): `count_on_bbr` counts, per prefix, exactly the open
connections on BBR to an address in it (IPv4 and IPv6), and the count falls when one closes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.agent.health import in_netns
from collector.agent.lingering import count_on_bbr, reverted
from collector.agent.plan import Wanted
from schemas.congestion_pb2 import ApplyStatus
from tests.support.agent_lab import Lab, build_lab

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")
PREFIX = "198.51.100.0/24"  # client_a of the lab


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"dyncc-lg-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        ip = ["ip", "-n", name]
        subprocess.run([*ip, "link", "set", "lo", "up"], check=True)
        for addr in ("192.0.2.1/32", "203.0.113.1/32", "198.51.100.1/32"):
            subprocess.run([*ip, "addr", "add", addr, "dev", "lo"], check=True)
        for addr in ("2001:db8::1/128", "2001:db8:1::1/128"):
            subprocess.run([*ip, "addr", "add", addr, "dev", "lo", "nodad"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _pair(family: int, server: str, client: str, cc: bytes) -> list[socket.socket]:
    """A listener on `server` (cubic), a client from `client` on `cc`, and the accepted socket."""
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"cubic")
    listener.bind((server, 0))
    listener.listen(4)
    conn = socket.socket(family, socket.SOCK_STREAM)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc)
    conn.bind((client, 0))
    conn.connect(listener.getsockname()[:2])
    accepted, _ = listener.accept()
    return [conn, accepted, listener]


def test_counts_the_open_bbr_connections_of_each_prefix(netns: str) -> None:
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    if "bbr" not in available:
        pytest.skip("no tcp_bbr")
    with contextlib.ExitStack() as stack:

        def open_all() -> list[list[socket.socket]]:
            return [
                _pair(socket.AF_INET, "192.0.2.1", "203.0.113.1", b"bbr"),
                _pair(socket.AF_INET, "192.0.2.1", "203.0.113.1", b"bbr"),
                _pair(socket.AF_INET, "192.0.2.1", "203.0.113.1", b"cubic"),
                _pair(socket.AF_INET, "198.51.100.1", "203.0.113.1", b"bbr"),
                _pair(socket.AF_INET6, "2001:db8::1", "2001:db8:1::1", b"bbr"),
            ]

        pairs = in_netns(netns, open_all)
        for pair in pairs:
            for s in pair:
                stack.callback(s.close)
        prefixes = ["192.0.2.0/24", "2001:db8::/64", "198.51.100.0/24", "203.0.113.0/24"]
        # the accepted sockets (peer 203.0.113.1 / 2001:db8:1::1) are cubic, like their listeners
        assert count_on_bbr(netns, prefixes) == {
            "192.0.2.0/24": 2,
            "2001:db8::/64": 1,
            "198.51.100.0/24": 1,
            "203.0.113.0/24": 0,
        }
        assert count_on_bbr(None, ["192.0.2.0/24"]) == {"192.0.2.0/24": 0}  # not this namespace's
        rst = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close sends RST, the socket is gone at once
        pairs[0][0].setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, rst)
        pairs[0][0].close()
        assert count_on_bbr(netns, prefixes)["192.0.2.0/24"] == 1
        pairs[4][0].setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, rst)
        pairs[4][0].close()
        assert count_on_bbr(netns, prefixes) == {
            "192.0.2.0/24": 1,
            "2001:db8::/64": 0,
            "198.51.100.0/24": 1,
            "203.0.113.0/24": 0,
        }


def test_reverted_names_the_prefixes_that_leave_bbr() -> None:
    before = {
        "192.0.2.0/24": Wanted("192.0.2.0/24", "bbr", False),
        "198.51.100.0/24": Wanted("198.51.100.0/24", "bbr", True),
        "203.0.113.0/24": Wanted("203.0.113.0/24", "cubic", False),
        "2001:db8::/56": Wanted("2001:db8::/56", "bbr", False),
    }
    after = {
        "198.51.100.0/24": Wanted("198.51.100.0/24", "cubic", False),
        "2001:db8::/56": Wanted("2001:db8::/56", "bbr", False),
    }
    assert reverted(before, after) == {"192.0.2.0/24", "198.51.100.0/24"}
    assert reverted(before, {}) == {"192.0.2.0/24", "198.51.100.0/24", "2001:db8::/56"}


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    with build_lab(tmp_path, prefix="lg") as made:
        yield made


@pytest.mark.netns
def test_a_revert_counts_and_logs_the_connections_left_on_bbr(lab: Lab, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 33 item 5: an edge (route mode) serves a client of 198.51.100.0/24 on BBR; a config
    reverts the prefix to CUBIC.  Before, the open connection stayed on BBR with nothing logged or
    counted; now the apply counts it (dyncc_agent_reverted_bbr_connections 1, one log line), and
    the reconcile after it closed sets 0 and says so."""
    caplog.set_level(logging.INFO, "dyncc.agent")
    agent = lab.agent(agent_kw={"open_connections": None})
    gauge = "dyncc_agent_reverted_bbr_connections"
    with contextlib.ExitStack() as stack:
        assert agent.handle(lab.config(1, [PREFIX])).result == ApplyStatus.APPLIED
        assert agent.metrics.registry.get_sample_value(gauge) == 0

        listener = in_netns(lab.edge, lambda: socket.create_server(("192.0.2.2", 0)))
        stack.callback(listener.close)
        port = listener.getsockname()[1]
        client = in_netns(lab.client_a, lambda: socket.create_connection(("192.0.2.2", port), timeout=10))
        stack.callback(client.close)
        served, _ = listener.accept()
        stack.callback(served.close)
        assert served.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0") == b"bbr"

        status = agent.handle(lab.config(2, [PREFIX], algo="cubic"))
        assert status.result == ApplyStatus.APPLIED
        assert served.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0") == b"bbr"  # kept
        assert agent.metrics.registry.get_sample_value(gauge) == 1
        assert (
            f"1 open connections of 1 prefixes moved off BBR stay on BBR until they close ({PREFIX} 1)" in caplog.text
        )

        served.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        served.close()  # RST: gone at once
        agent.reconcile("periodic")
        assert agent.metrics.registry.get_sample_value(gauge) == 0
        assert "no open connection of a prefix moved off BBR is on BBR any more" in caplog.text
        assert agent.lingering == set()
    agent.close()
