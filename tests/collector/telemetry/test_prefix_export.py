"""`--export-addresses prefix`: the client (remote) address leaves the host as its client prefix
(host bits zeroed), checked on the encoder's columns and on a real `dyncc collect --once` over
loopback sockets (own namespace, no servers needed)."""

from __future__ import annotations

import argparse
import ipaddress
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import numpy as np
import pytest

from collector.telemetry.poller import Poller, PollerConfig
from collector.telemetry.settings import CollectSettings
from dyncc_common.errors import ConfigError
from schemas.tcpinfo_decode import decode_batch

CLIENT_V4 = "127.0.0.77"  # a loopback address only this test's client sockets use


def load_config(*argv: str) -> CollectSettings:
    p = argparse.ArgumentParser()
    CollectSettings.add_arguments(p)
    flags = vars(p.parse_args(list(argv)))
    return CollectSettings.from_sources(flags, flags.get("config"))


@contextmanager
def loopback_clients() -> Iterator[list[int]]:
    """Established TCP connections: IPv4 from CLIENT_V4 to 127.0.0.1, and IPv6 on ::1 when the host has
    it; yields the servers' ports."""
    with ExitStack() as stack:
        ports = []
        pairs = [(socket.AF_INET, "127.0.0.1", CLIENT_V4)]
        if socket.has_ipv6:
            pairs.append((socket.AF_INET6, "::1", "::1"))
        for family, server_addr, client_addr in pairs:
            server = stack.enter_context(socket.socket(family, socket.SOCK_STREAM))
            try:
                server.bind((server_addr, 0))
            except OSError:
                continue  # no IPv6 loopback here
            server.listen(8)
            for _ in range(3):
                client = stack.enter_context(socket.socket(family, socket.SOCK_STREAM))
                client.bind((client_addr, 0))
                client.connect(server.getsockname()[:2])
                stack.enter_context(server.accept()[0])
            ports.append(int(server.getsockname()[1]))
        yield ports


def host_bits_zero(address: str, prefix: str) -> bool:
    return ipaddress.ip_address(address) == ipaddress.ip_network(prefix).network_address


def test_setting_default_choices_and_toml(tmp_path) -> None:
    assert load_config().export_addresses == "full"
    assert PollerConfig.from_settings(load_config("--export-addresses", "prefix")).export_addresses == "prefix"
    toml = tmp_path / "collect.toml"
    toml.write_text('[collect]\nexport_addresses = "prefix"\n')
    assert load_config("--config", str(toml)).export_addresses == "prefix"
    toml.write_text('[collect]\nexport_addresses = "hashed"\n')
    with pytest.raises(ConfigError, match="export_addresses"):
        load_config("--config", str(toml))


@pytest.mark.parametrize("v4_len,v6_len", [(24, 56), (20, 48)])
def test_prefix_mode_zeroes_host_bits_in_the_encoded_column(v4_len: int, v6_len: int) -> None:
    """In process: the decoded dst_addr column equals client_prefix row for row (the collector's lengths)."""
    with loopback_clients():
        for mode in ("full", "prefix"):
            cfg = load_config("--no-default-excludes", "--export-addresses", mode)
            poller_cfg = PollerConfig.from_settings(cfg)
            poller_cfg.prefix_v4, poller_cfg.prefix_v6 = v4_len, v6_len
            batches = [decode_batch(b) for b in Poller(poller_cfg).poll().batches]
            dst = np.concatenate([b.columns["dst_addr"] for b in batches])
            prefix = np.concatenate([b.columns["client_prefix"] for b in batches])
            assert len(dst) >= 6
            mapped_client = np.frombuffer(ipaddress.IPv6Address(f"::ffff:{CLIENT_V4}").packed, np.uint8)
            has_client = bool((dst == mapped_client).all(axis=1).any())
            if mode == "full":
                assert has_client and not np.array_equal(dst, prefix)
            else:
                assert not has_client and np.array_equal(dst, prefix)


def test_collect_once_stdout_exports_no_full_client_address() -> None:
    """A real `dyncc collect --once --sink stdout`: with --export-addresses prefix every exported remote
    address is a client prefix (host bits zero); without it the loopback clients' addresses are there."""
    with loopback_clients() as ports:
        assert ports
        rows = {}
        for mode in ("full", "prefix"):
            done = subprocess.run(
                [sys.executable, "-m", "dyncc.cli", "collect", "--once", "--sink", "stdout",
                 "--no-default-excludes", "--export-addresses", mode],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            rows[mode] = [json.loads(line) for line in done.stdout.splitlines()]
    ours = [r for r in rows["full"] if r["src_port"] in ports or r["dst_port"] in ports]
    assert any(r["dst"] == CLIENT_V4 for r in ours)  # the full mode exports the client's own address
    assert not all(host_bits_zero(r["dst"], r["prefix"]) for r in ours)
    exported = rows["prefix"]
    ours = [r for r in exported if r["src_port"] in ports or r["dst_port"] in ports]
    assert len(ours) >= 6 and any(r["src_port"] in ports for r in ours)
    assert all(host_bits_zero(r["dst"], r["prefix"]) for r in exported), [
        (r["dst"], r["prefix"]) for r in exported if not host_bits_zero(r["dst"], r["prefix"])
    ]
    assert {r["dst"] for r in ours} <= {"127.0.0.0", "::"}
    assert all(r["prefix"] in ("127.0.0.0/24", "::/56") for r in ours)
