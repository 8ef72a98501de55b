"""A namespace lab for the agent's route tests: an edge namespace with a veth pair and an agent (root only)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from collector.agent.core import Agent
from collector.agent.routes import RouteTable
from collector.agent.state import AgentState
from schemas.congestion_pb2 import CongestionConfig, PrefixEntry
from schemas.signing import generate_keypair, load_private_key, load_public_key, sign
from tests.support.netns_util import namespaces, new_ns_name, ns_sh, require_root, veth_pair

POP = "lax"


@dataclass
class Lab:
    edge: str
    router: str
    client_a: str
    client_b: str
    private_key_path: Path
    public_key_path: Path
    state_dir: Path
    signed_at_ns: int = field(default_factory=time.time_ns)  # the configs' created_at_ns: one per lab

    def sh(self, *cmd: str) -> str:
        return ns_sh(self.edge, *cmd)

    def owned_text(self) -> str:
        v4 = self.sh("ip", "route", "show", "proto", "250")
        return v4 + self.sh("ip", "-6", "route", "show", "proto", "250")

    def owned_json(self) -> list[dict]:
        v4 = json.loads(self.sh("ip", "-j", "route", "show", "proto", "250"))
        v6 = json.loads(self.sh("ip", "-j", "-6", "route", "show", "proto", "250"))
        return list(v4) + list(v6)

    def config(
        self,
        version: int,
        prefixes: list[str],
        *,
        pop: str = POP,
        algo: str = "bbr",
        signed: bool = True,
        kill: bool = False,
        created_at_ns: int | None = None,
    ) -> CongestionConfig:
        """A config for the lab's edge, signed (unless not `signed`) at the lab's start or at `created_at_ns`:
        the same arguments give the same config."""
        config = CongestionConfig(
            schema_version=1,
            pop=pop,
            version=version,
            kill_switch=kill,
            round_id=f"r{version}",
            created_at_ns=self.signed_at_ns if created_at_ns is None else created_at_ns,
        )
        config.entries.extend(PrefixEntry(prefix=p, algorithm=algo, reason="test") for p in prefixes)
        return sign(config, load_private_key(self.private_key_path)) if signed else config

    def agent(self, table_cls: type[RouteTable] = RouteTable, agent_kw: dict | None = None, **table_kw) -> Agent:
        """An agent for the edge (`agent_kw`: more Agent arguments, e.g. policy=, max_config_age=)."""
        table = table_cls(self.edge, **table_kw)
        return Agent(
            pop=POP,
            host="edge-1",
            netns=self.edge,
            public_key=load_public_key(self.public_key_path),
            state=AgentState(self.state_dir, POP).load(),
            table=table,
            **(agent_kw or {}),
        )


@contextmanager
def build_lab(tmp_path: Path, prefix: str = "dag") -> Iterator[Lab]:
    """The lab; its namespaces are named PREFIX-e, PREFIX-r, PREFIX-ca, PREFIX-cb (+ a random suffix)."""
    require_root()
    names = [new_ns_name(f"{prefix}-{p}") for p in ("e", "r", "ca", "cb")]
    with namespaces(names) as (edge, router, client_a, client_b):
        veth_pair(edge, "up0", router, "down0")
        veth_pair(router, "ca", client_a, "eth0")
        veth_pair(router, "cb", client_b, "eth0")
        for ns, dev, addrs in (
            (edge, "up0", ["192.0.2.2/24", "2001:db8:1::2/64"]),
            (router, "down0", ["192.0.2.1/24", "192.0.2.3/24", "2001:db8:1::1/64", "2001:db8:1::3/64"]),
            (router, "ca", ["198.51.100.1/24", "2001:db8:100::1/64"]),
            (router, "cb", ["203.0.113.1/24", "2001:db8:200::1/64"]),
            (client_a, "eth0", ["198.51.100.10/24", "2001:db8:100::10/64"]),
            (client_b, "eth0", ["203.0.113.10/24", "2001:db8:200::10/64"]),
        ):
            for addr in addrs:
                extra = ["nodad"] if ":" in addr else []
                ns_sh(ns, "ip", "addr", "add", addr, "dev", dev, *extra)
        ns_sh(router, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
        ns_sh(edge, "ip", "route", "add", "default", "via", "192.0.2.1", "dev", "up0", "congctl", "cubic")
        ns_sh(edge, "ip", "-6", "route", "add", "default", "via", "2001:db8:1::1", "dev", "up0", "congctl", "cubic")
        for ns, gw4, gw6 in (
            (client_a, "198.51.100.1", "2001:db8:100::1"),
            (client_b, "203.0.113.1", "2001:db8:200::1"),
        ):
            ns_sh(ns, "ip", "route", "add", "default", "via", gw4)
            ns_sh(ns, "ip", "-6", "route", "add", "default", "via", gw6)
        generate_keypair(tmp_path / "signing.key", tmp_path / "signing.pub")
        yield Lab(
            edge, router, client_a, client_b, tmp_path / "signing.key", tmp_path / "signing.pub", tmp_path / "state"
        )
