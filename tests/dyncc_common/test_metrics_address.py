"""Metrics listen on loopback unless metrics_address opens them: the bound address of a real
socket, and a collector in a network namespace reached (or not) over a veth from another one."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter

from dyncc_common.errors import ConfigError
from dyncc_common.runtime import check_metrics_address, start_metrics
from tests.support.netns_util import REPO, ns_sh, require_root, sh

NS, PEER = "dsec-ns", "dsec-ns-peer"
NS_ADDR, PEER_ADDR = "192.0.2.1", "192.0.2.2"  # documentation addresses (RFC 5737)
PORT_DEFAULT, PORT_OPEN = 19628, 19629


def listening_addresses(port: int) -> set[str]:
    """Local addresses of the TCP sockets listening on `port` in this namespace (/proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(addr)[::-1]))
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_start_metrics_binds_loopback_by_default() -> None:
    registry = CollectorRegistry()
    Counter("dsec_probe", "a probe", registry=registry).inc()
    port = free_port()
    start_metrics(port, registry)
    assert listening_addresses(port) == {"127.0.0.1"}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert b"dsec_probe_total 1.0" in resp.read()
    port = free_port()
    start_metrics(port, registry, "0.0.0.0")
    assert listening_addresses(port) == {"0.0.0.0"}


@pytest.mark.parametrize("value", ["localhost", "0.0.0.0/0", "300.1.1.1", ""])
def test_metrics_address_must_be_an_ip_address(value: str) -> None:
    with pytest.raises(ConfigError, match="must be an IP address"):
        check_metrics_address(value, "--metrics-address")
    assert check_metrics_address("[::]", "x") == "::"


def test_metrics_address_setting_of_every_component() -> None:
    from collector.agent.settings import AgentSettings
    from collector.telemetry.settings import CollectSettings
    from controller.control.settings import ControlSettings
    from controller.ingest.settings import AccessLogSettings, IngestSettings

    for cls in (CollectSettings, AgentSettings, ControlSettings, IngestSettings, AccessLogSettings):
        assert cls.__dataclass_fields__["metrics_address"].default == "127.0.0.1", cls.__name__
        with pytest.raises(ConfigError, match="--metrics-address"):
            cls.from_sources({"metrics_address": "any"}, None)


@contextlib.contextmanager
def two_namespaces() -> Iterator[None]:
    """dsec-ns (192.0.2.1) and dsec-ns-peer (192.0.2.2) joined by a veth; removed afterwards, also on failure."""
    for name in (NS, PEER):
        sh("ip", "netns", "del", name, check=False)  # a leftover of an interrupted run
    try:
        for name in (NS, PEER):
            sh("ip", "netns", "add", name)
            ns_sh(name, "ip", "link", "set", "lo", "up")
        sh("ip", "link", "add", "dsec0", "netns", NS, "type", "veth", "peer", "name", "dsec1", "netns", PEER)
        for name, dev, addr in ((NS, "dsec0", NS_ADDR), (PEER, "dsec1", PEER_ADDR)):
            ns_sh(name, "ip", "addr", "add", f"{addr}/24", "dev", dev)
            ns_sh(name, "ip", "link", "set", dev, "up")
        yield
    finally:
        for name in (NS, PEER):
            for pid in sh("ip", "netns", "pids", name, check=False).split():
                sh("kill", "-9", pid, check=False)
            sh("ip", "netns", "del", name, check=False)


def fetch(ns: str, url: str) -> str:
    """GET `url` from inside namespace `ns`: the body, or "error: <reason>"."""
    code = (
        "import sys, urllib.request\n"
        "try:\n"
        f"    print(urllib.request.urlopen({url!r}, timeout=3).read().decode())\n"
        "except OSError as exc:\n"
        "    print('error:', getattr(exc, 'reason', exc))\n"
    )
    return ns_sh(ns, sys.executable, "-c", code, check=False)


def start_collector(tmp_path: Path, port: int, *extra: str) -> subprocess.Popen[str]:
    """`dyncc collect` (file sink) in dsec-ns serving metrics on `port`, ready once loopback answers."""
    args = ["--sink", "file", "--out", str(tmp_path / f"out-{port}"), "--interval", "1s", "--metrics-port", str(port)]
    proc = subprocess.Popen(
        ["ip", "netns", "exec", NS, sys.executable, "-m", "dyncc.cli", "collect", *args, *extra],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while "dyncc_" not in fetch(NS, f"http://127.0.0.1:{port}/metrics"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"collector did not serve metrics: {proc.communicate()[1][-2000:]}")
        time.sleep(0.2)
    return proc


@pytest.mark.netns
def test_metrics_not_reachable_from_the_network_by_default(tmp_path: Path) -> None:
    require_root()
    with two_namespaces():
        procs = [start_collector(tmp_path, PORT_DEFAULT)]
        try:
            closed = fetch(PEER, f"http://{NS_ADDR}:{PORT_DEFAULT}/metrics")
            assert closed.startswith("error:") and "refused" in closed, closed
            # the same over the veth with the address setting: the network path works
            procs.append(start_collector(tmp_path, PORT_OPEN, "--metrics-address", "0.0.0.0"))
            opened = fetch(PEER, f"http://{NS_ADDR}:{PORT_OPEN}/metrics")
            assert "dyncc_" in opened, opened[:500]
        finally:
            for proc in procs:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
                proc.kill()
