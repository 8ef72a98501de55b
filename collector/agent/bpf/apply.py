"""All-or-nothing apply of a desired prefix set onto the sock_ops program's maps (`--enforce bpf`).

`BpfApplier` has the route applier's interface (`apply`, `owned_count`, `in_force`,
`describe_health`, `close`).  One apply: compute the exact map contents
(collector/agent/bpf/plan.py), load and pin the program if needed, dump the maps, write
deletes then updates, read every entry back and compare with the plan, then make sure the
program is attached to the cgroup.  Any write error, read-back difference or attach failure
restores the maps exactly as they were before the apply and reports failure.  An empty set
(the kill switch) empties the maps, reads them back empty, then detaches the program and
removes its pins.  Entries carry the agent's network-namespace cookie, so the program only
acts on connections of the namespace the agent manages.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping

from collector.agent.apply import ApplyOutcome
from collector.agent.bpf.maps import BPF_MAP_TYPE_LPM_TRIE, BPF_MAP_TYPE_PERCPU_ARRAY, BpfMapError, PinnedMap
from collector.agent.bpf.plan import (
    KEY_SIZES,
    MAP_STATS,
    SELECTION_MAPS,
    START_ALGORITHM,
    STATS,
    VALUE,
    diff_map,
    entries_of,
    readback_problems,
)
from collector.agent.bpf.plan import desired_maps as plan_maps
from collector.agent.bpf.prog import BpfProgram, BpfProgramError
from collector.agent.health import in_netns
from collector.agent.plan import InvalidConfig, Wanted
from schemas.congestion_pb2 import HostHealth

SO_NETNS_COOKIE = 71  # asm-generic/socket.h (Linux 5.14+)
Maps = dict[str, dict[bytes, bytes]]


class InjectedFailure(BpfMapError):
    """The failure `fail_after` asked for (tests of the rollback path)."""


def netns_cookie(netns: str | None) -> int:
    """The cookie of network namespace `netns` (None = ours), as bpf_get_netns_cookie returns it."""

    def cookie() -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            return int.from_bytes(sock.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8), "little")

    return in_netns(netns, cookie)


class BpfApplier:
    def __init__(
        self,
        program: BpfProgram,
        *,
        netns_cookie: int = 0,
        start: str = START_ALGORITHM,
        fail_after: int | None = None,
    ) -> None:
        self.program = program
        self.netns_cookie = netns_cookie
        self.start = start
        self.fail_after = fail_after  # the (N+1)-th map write of the next apply fails (one shot)
        self._writes_left: int | None = None

    # ------------------------------------------------------------------ reads

    def _open(self, name: str) -> PinnedMap:
        path = self.program.map_path(name)
        if name == MAP_STATS:
            return PinnedMap(path, map_type=BPF_MAP_TYPE_PERCPU_ARRAY, key_size=4, value_size=8)
        return PinnedMap(path, map_type=BPF_MAP_TYPE_LPM_TRIE, key_size=KEY_SIZES[name], value_size=VALUE.size)

    def read_maps(self) -> Maps:
        """The selection maps' contents ({} per map when nothing is pinned)."""
        if not self.program.loaded():
            return {name: {} for name in SELECTION_MAPS}
        out: Maps = {}
        for name in SELECTION_MAPS:
            with self._open(name) as bpf_map:
                out[name] = bpf_map.items()
        return out

    def owned_count(self) -> int:
        try:
            return sum(len(m) for m in self.read_maps().values())
        except (BpfMapError, BpfProgramError):
            return 0

    def in_force(self) -> dict[str, Wanted]:
        """The maps' entries as wanted prefixes (what enforcement does now)."""
        return {p: Wanted(p, t.algorithm, False, t.threshold) for p, t in entries_of(self.read_maps()).items()}

    def counters(self) -> dict[str, int]:
        """The program's counters (STATS names; empty when not loaded)."""
        if not self.program.loaded():
            return {}
        with self._open(MAP_STATS) as stats:
            return dict(zip(STATS, stats.percpu_sums(), strict=False))

    def describe_health(self, health: HostHealth) -> None:
        health.enforce = "bpf"
        try:
            health.bpf_attached = self.program.attached()
            counts = self.counters()
        except (BpfMapError, BpfProgramError):
            return
        health.bpf_selected = counts.get("selected", 0)
        health.bpf_switched = counts.get("switched", 0)

    def close(self) -> None:
        """Nothing to release: the program and its maps stay pinned and attached."""

    # ----------------------------------------------------------------- writes

    def _write(self, current: Maps, target: Maps, counts: ApplyOutcome | None = None) -> None:
        for name in SELECTION_MAPS:
            delete, put = diff_map(current.get(name, {}), target.get(name, {}))
            with self._open(name) as bpf_map:
                for key in delete:
                    self._tick()
                    bpf_map.delete(key)
                for key, value in put.items():
                    self._tick()
                    bpf_map.put(key, value)
            if counts is not None:
                replaced = sum(1 for key in put if key in current.get(name, {}))
                counts.added += len(put) - replaced
                counts.replaced += replaced
                counts.removed += len(delete)
                counts.kept += len(target.get(name, {})) - len(put)

    def _tick(self) -> None:
        if self._writes_left is None:
            return
        if self._writes_left <= 0:
            self._writes_left = None
            raise InjectedFailure("injected failure of a map write")
        self._writes_left -= 1

    def _restore(self, previous: Maps) -> list[str]:
        """Put the maps back exactly as `previous`; returns rollback errors (empty = restored)."""
        self._writes_left = None
        try:
            self._write(self.read_maps(), previous)
            problems = readback_problems(previous, self.read_maps())
        except (BpfMapError, BpfProgramError) as exc:
            problems = [str(exc)]
        return [f"rollback incomplete: {p}" for p in problems]

    def apply(self, wanted: Mapping[str, Wanted]) -> ApplyOutcome:
        started = time.monotonic()
        try:
            target = plan_maps(wanted, netns=self.netns_cookie, start=self.start)
        except InvalidConfig as exc:
            return ApplyOutcome(ok=False, errors=[str(exc)], seconds=time.monotonic() - started)
        self._writes_left, self.fail_after = self.fail_after, None
        try:
            if wanted:
                self.program.ensure_loaded()
            before = self.read_maps()
        except (BpfMapError, BpfProgramError) as exc:  # nothing written yet: nothing to roll back
            self._writes_left = None
            return ApplyOutcome(ok=False, errors=[str(exc)], seconds=time.monotonic() - started)
        written = ApplyOutcome(ok=True)  # the writes' counts: the outcome if the apply succeeds
        outcome = ApplyOutcome(ok=True)
        try:
            if self.program.loaded():
                self._write(before, target, written)
                problems = readback_problems(target, self.read_maps())
                if problems:
                    raise BpfMapError("read-back: " + "; ".join(problems))
            if wanted:
                self.program.ensure_attached()
            else:
                self.program.remove()
        except (BpfMapError, BpfProgramError) as exc:
            outcome.ok = False
            outcome.errors.append(str(exc))
            outcome.errors.extend(self._restore(before))
            outcome.rolled_back = True
            outcome.owned = sum(len(m) for m in before.values())
        else:
            outcome = written
            outcome.owned = sum(len(m) for m in target.values())
        self._writes_left = None
        outcome.seconds = time.monotonic() - started
        return outcome
