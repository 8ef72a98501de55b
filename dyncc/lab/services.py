"""The processes and qdiscs a fleet lab runs on its network, started and stopped as one.

- paths: on the router's egress towards each client namespace, one htb class per client prefix
  with its path class's rate and queue (u32 filter on the destination), random loss from a tc BPF
  program (built with clang), and the delay relay for the client -> edge direction, with a busy
  uplink per deep prefix (dyncc/lab/paths.py, dyncc/lab/delay.py, dyncc/lab/bpf_build.py); alternating
  prefixes switch between their poor and their fine path every round (`shape_round`);
- web: nginx on every edge host serving the object catalogue, access log in the `dyncc` format
  (dyncc/lab/web.py);
- clients: one HTTP load process per client namespace, one virtual client per prefix (three for an
  alternating prefix; one request per connection for alternating, lossy and deep prefixes; a shorter
  think time for low-RTT, lossy and deep prefixes, and only the larger objects for lossy and deep
  ones: CLIENTS_PER_PREFIX, KEEPALIVE_BY_CLASS, THINK_BY_CLASS, MIN_SIZE_BY_CLASS), each
  asking its POP's edge hosts (dyncc/lab/http_load.py);
- access logs: each edge host's new lines are loaded into http_requests every round
  (controller.ingest.access_loader), and copied beside a recording at the end.
Nothing here outlives the lab: stop() ends every process it started (the namespaces' deletion
removes the qdiscs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import ipaddress
import logging
import shutil
from pathlib import Path
from typing import Any

from controller.ingest.access_loader import AccessLogLoader
from controller.store import Store
from dyncc.lab import paths as lab_paths
from dyncc.lab.bpf_build import build_random_drop
from dyncc.lab.delay import DelayRelay, Uplink
from dyncc.lab.http_load import HttpLoad, LoadConfig, VirtualClient
from dyncc.lab.topology import ClientHost, ClientPrefix, Topology, run_all
from dyncc.lab.web import EdgeWeb, catalogue, write_docroot

log = logging.getLogger("dyncc.lab")

# Virtual clients per prefix, by path class (1 if not listed), and requests per connection.  An
# alternating prefix must be measured in every round by flows of that round: with one client it
# finished about one transfer above the qualifying size per round, so many rounds went uncounted;
# and an idle keep-alive connection goes on reporting the delivery rate of its last transfer, so
# a fast round was measured by connections left idle from the slow round before (docs/lab.md,
# "Alternating prefixes").  A low-RTT prefix (3 Mbit/s) also fell below the samples a bucket needs
# in some rounds under load; its one client thinks less (THINK_BY_CLASS, a factor on the lab's mean
# think time) so it makes more transfers, still one at a time: a second client's flow would fill
# the prefix's queue and a new connection's min_rtt would then include that queue.  Lossy and deep
# prefixes, which run trials, have one client that asks only for the larger objects (MIN_SIZE_BY_CLASS,
# those a poll can see past the 100 KB a sample needs) and thinks a third of the lab's think time: a
# trial judges one p10 per bucket, and a bucket of a few samples gave wild p10s, but two clients'
# flows overlapping on the prefix's bottleneck shrank the effect the trial measures (lossy: two
# CUBIC flows, each limited by the loss, fill the link much as two BBR flows do; deep: two BBR
# flows together keep more in flight than one; docs/lab.md, "Lossy and deep prefixes").
CLIENTS_PER_PREFIX = {"alternating": 3}
KEEPALIVE = 2
KEEPALIVE_BY_CLASS = {"alternating": 1, "lossy": 1, "deep": 1}
THINK_BY_CLASS = {"lowrtt": 1 / 3, "lossy": 1 / 3, "deep": 1 / 3}
MIN_SIZE_BY_CLASS = {"lossy": 150 * 1024, "deep": 150 * 1024}


def class_network_of(p: ClientPrefix) -> ipaddress.IPv6Network:
    """The /48 of a client /56 (the lab numbers one /48 per POP and class)."""
    return ipaddress.IPv6Network(p.prefix).supernet(new_prefix=48)


def access_log_name(host: str) -> str:
    return f"access-{host}.log.gz"


class LabServices:
    def __init__(self, topo: Topology, workdir: Path, store: Store, *, think_time: float = 4.0) -> None:
        self.topo = topo
        self.workdir = workdir
        self.store = store
        self.think_time = think_time
        self.webs: dict[str, EdgeWeb] = {}
        self.load = HttpLoad(
            LoadConfig(think=think_time, port=topo.port, keepalive=KEEPALIVE), log_dir=workdir / "http-load"
        )
        self.relay: DelayRelay | None = None
        self.loaders: dict[str, AccessLogLoader] = {}
        self._alt_state: dict[str, bool] = {}

    @staticmethod
    def describe_paths() -> dict[str, Any]:
        """The path classes' parameters (for a recording's metadata)."""
        return {
            name: {"shared": pc.shared, "specs": [dataclasses.asdict(spec) for spec in pc.specs]}
            for name, pc in lab_paths.CLASSES.items()
        }

    # -- start / stop ----------------------------------------------------------------------

    def start(self) -> None:
        self._start_paths()
        self._start_web()
        self._start_clients()

    def _start_paths(self) -> None:
        topo = self.topo
        bpf_dir = self.workdir / "bpf"
        cmds: list[list[str]] = []
        for e in topo.edges:
            cmds += lab_paths.sender_commands(e.ns, "eth0")
        delays: dict[str, float] = {}
        uplinks: dict[str, Uplink] = {}
        delayed: list[str] = []
        for c in topo.clients:
            cmds += lab_paths.shaping_commands(topo.router_ns, c.link.router_if, self._specs(c, 0))
            for p in c.prefixes:
                if c.klass == "alternating":
                    self._alt_state[p.prefix] = p.slow_in_round(0)
            spec = lab_paths.path_class(c.klass).spec()
            if spec.loss > 0:
                obj = build_random_drop(spec.loss, bpf_dir)
                cmds += lab_paths.loss_commands(topo.router_ns, c.link.router_if, str(obj))
            if spec.delayed:
                delayed.append(c.link.router_if)
                for p in c.prefixes:
                    net = p.prefix if p.family == 4 else str(class_network_of(p))
                    delays[net] = spec.delay_ms
                uplinks.update(lab_paths.uplink_map(self._specs(c, 0)))
        if delayed:
            cmds += lab_paths.delay_commands(topo.router_ns, delayed)
        run_all(cmds)
        if delayed:
            self.relay = DelayRelay()
            self.relay.start(
                topo.router_ns, lab_paths.DELAY_DEV, delays, uplinks=uplinks, log_path=self.workdir / "delay-relay.log"
            )

    def _specs(self, c: ClientHost, round_no: int) -> list[tuple[str | tuple[str, ...], lab_paths.PathSpec]]:
        pc = lab_paths.path_class(c.klass)
        return pc.entries([p.prefix for p in c.prefixes], round_no, [p.phase for p in c.prefixes])

    def _start_web(self) -> None:
        docroot = self.workdir / "www"
        write_docroot(docroot, catalogue())
        for e in self.topo.edges:
            web = EdgeWeb(e.ns, self.workdir / "web" / e.host, docroot, self.topo.port)
            web.start()
            self.webs[e.host] = web

    def _start_clients(self) -> None:
        topo = self.topo
        for i, c in enumerate(topo.clients):
            edges = topo.edges_of(c.pop)
            per_prefix = CLIENTS_PER_PREFIX.get(c.klass, 1)
            clients = [
                VirtualClient(p.addr, tuple(e.addr(p.family) for e in edges))
                for p in c.prefixes
                for _ in range(per_prefix)
            ]
            keepalive = KEEPALIVE_BY_CLASS.get(c.klass, KEEPALIVE)
            think = self.load.cfg.think * THINK_BY_CLASS.get(c.klass, 1.0)
            min_size = MIN_SIZE_BY_CLASS.get(c.klass, 0)
            cfg = dataclasses.replace(self.load.cfg, keepalive=keepalive, think=think, min_size=min_size)
            self.load.start(c.ns, clients, seed=i + 1, name=c.link.router_if, cfg=cfg)

    def stop_clients(self) -> None:
        with contextlib.suppress(Exception):
            self.load.stop()

    def stop(self) -> None:
        self.stop_clients()
        for web in self.webs.values():
            try:
                web.stop()
            except Exception as exc:  # teardown goes on
                log.warning("stopping nginx: %s", exc)
        if self.relay is not None:
            with contextlib.suppress(Exception):
                self.relay.stop()
        for loader in self.loaders.values():
            with contextlib.suppress(Exception):
                loader.close()

    # -- per round -------------------------------------------------------------------------

    def shape_round(self, round_no: int) -> None:
        """Alternating prefixes: their path for `round_no` (a class change on the router)."""
        cmds: list[list[str]] = []
        for c in self.topo.clients:
            if c.klass != "alternating":
                continue
            for index, p in enumerate(c.prefixes):
                slow = p.slow_in_round(round_no)
                if self._alt_state.get(p.prefix) == slow:
                    continue
                self._alt_state[p.prefix] = slow
                spec = lab_paths.path_class(c.klass).spec(round_no, p.phase)
                cmds += lab_paths.change_class_commands(self.topo.router_ns, c.link.router_if, index, spec)
        run_all(cmds)

    def load_access_logs(self) -> int:
        """Load every edge host's new access-log lines; returns the rows loaded."""
        rows = 0
        for e in self.topo.edges:
            web = self.webs.get(e.host)
            if web is None:
                continue
            loader = self.loaders.get(e.host)
            if loader is None:
                loader = self.loaders[e.host] = AccessLogLoader(self.store, pop=e.pop, host=e.host)
            try:
                rows += loader.load(web.access_log).rows
            except Exception as exc:  # a round goes on without them; the next load catches up
                log.warning("access log of %s not loaded: %s", e.host, exc)
        return rows

    def problems(self) -> list[str]:
        out = []
        if self.load.exited():
            out.append(f"{self.load.exited()} HTTP load processes ended early")
        if self.relay is not None and not self.relay.running():
            out.append("the delay relay ended")
        return out

    def save_access_logs(self, recording: Path) -> None:
        """Copy each edge host's access log, gzipped, beside the recording."""
        for host, web in self.webs.items():
            target = recording.with_name(f"{recording.name}.{access_log_name(host)}")
            try:
                with open(web.access_log, "rb") as src, gzip.open(target, "wb", compresslevel=9) as dst:
                    shutil.copyfileobj(src, dst)
            except OSError as exc:
                log.warning("access log of %s not saved: %s", host, exc)
