"""The lab's edge agent: the real `collector.agent.core.Agent` on the edge namespace.

Configs arrive either from the publisher's directory (`<pop>.cfg`, what
`dyncc agent --from-file` reads) or from the config topic through the agent's
own Kafka consumer; each ApplyStatus goes into the store's apply_status table
directly (embedded mode) or onto the status topic (Kafka mode), where the
controller reads it like any agent's report.  With `enforce="bpf"` the agent
writes the sock_ops program's maps instead of routes (docs/enforce.md): the
program is attached to the cgroup v2 root, its entries carry the edge
namespace's cookie so each edge's program only touches that edge's
connections, and `close()` detaches it and removes its pins.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Any

from collector.agent.apply import Applier
from collector.agent.bpf.apply import BpfApplier, netns_cookie
from collector.agent.bpf.build import build_object
from collector.agent.bpf.prog import BpfProgram, default_cgroup
from collector.agent.core import Agent, AgentMetrics
from collector.agent.kafka import ConfigConsumer, StatusProducer
from collector.agent.routes import RouteTable
from collector.agent.state import AgentState
from controller.rollout.statuses import insert_status_rows, status_row
from controller.store import Store
from schemas.congestion_pb2 import ApplyStatus, CongestionConfig
from schemas.signing import load_public_key

log = logging.getLogger("dyncc.lab")
LAB_PROTO = 250


class LabAgent:
    def __init__(
        self,
        store: Store,
        *,
        edge_ns: str,
        pop: str,
        host: str,
        public_key: Path,
        state_dir: Path,
        kafka: str | None = None,
        kafka_options: dict[str, Any] | None = None,
        config_topic: str = "",
        status_topic: str = "",
        enforce: str = "route",
    ) -> None:
        self.store = store
        self.pop = pop
        self.host = host
        self.enforce = enforce
        table = RouteTable(edge_ns, proto=LAB_PROTO) if enforce == "route" else None
        self.agent = Agent(
            pop=pop,
            host=host,
            netns=edge_ns,
            public_key=load_public_key(public_key),
            state=AgentState(state_dir, pop).load(),
            table=table,
            applier=None if table is not None else lab_bpf_applier(edge_ns, host, state_dir),
            metrics=AgentMetrics(),
        )
        self.seen_files: dict[Path, int] = {}
        self._consumer: Any = None
        self._producer: Any = None
        if kafka:
            self._consumer = ConfigConsumer(kafka, config_topic, pop, host, options=kafka_options)
            self._producer = StatusProducer(kafka, status_topic, options=kafka_options)
        self.report(self.agent.reconcile("start"))

    def report(self, status: ApplyStatus) -> None:
        if self._producer is not None:
            self._producer.send(status)
            self._producer.flush(5)
            return
        row = status_row(status, received_ns=time.time_ns())
        if row is not None:
            insert_status_rows(self.store, [row])

    def apply(self, config: CongestionConfig) -> ApplyStatus:
        status = self.agent.handle(config)
        self.report(status)
        return status

    def apply_from_dir(self, publish_dir: Path) -> list[ApplyStatus]:
        """Apply the POP's config file if it changed since the last call (like --from-file)."""
        out = []
        for name in (f"{self.pop}.canary.cfg", f"{self.pop}.cfg"):
            path = publish_dir / name
            try:
                stamp = path.stat().st_mtime_ns
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            if self.seen_files.get(path) == stamp:
                continue
            self.seen_files[path] = stamp
            out.append(self.apply(CongestionConfig.FromString(data)))
        return out

    def apply_from_kafka(self, wait: float = 1.0) -> list[ApplyStatus]:
        """Apply every config the consumer delivers within `wait` seconds."""
        out = []
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            configs = self._consumer.poll(0.2)
            for config in configs:
                out.append(self.apply(config))
            if configs:
                deadline = min(deadline, time.monotonic() + 0.5)
        return out

    def routes(self) -> dict[str, str]:
        """Enforced prefixes on the edge (owned routes, or the program's map): prefix -> congestion control."""
        return {p: w.algorithm for p, w in self.agent.applier.in_force().items()}

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
        if self._producer is not None:
            self._producer.flush(5)
        if self.enforce == "bpf":  # the program is the lab's: it goes with the lab
            self.agent.applier.apply({})
        self.agent.close()


def lab_bpf_applier(edge_ns: str, host: str, state_dir: Path) -> Applier:
    """The eBPF enforcement of one lab edge: pins in /sys/fs/bpf/dyncc/lab-<host>-<run>, cgroup v2 root.

    <run> is a hash of the agent's state directory (a new temporary directory per lab run), so two
    labs never share pins.
    """
    cgroup = default_cgroup()
    if cgroup is None:
        raise RuntimeError("--enforce bpf needs a cgroup v2 hierarchy")
    run = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:8]
    pins = Path("/sys/fs/bpf/dyncc") / f"lab-{host}-{run}"
    program = BpfProgram(pins, cgroup, build_object(state_dir / "bpf"))
    return BpfApplier(program, netns_cookie=netns_cookie(edge_ns))
