"""Switch the OPEN connections of prefixes a config moved, with one run of a BPF TCP iterator.

Contract (docs/enforce.md, "Open connections"):

- `OpenConnections.for_agent(mode, netns, build_dir)` compiles collector/agent/bpf/cc_iter.c
  (collector/agent/bpf/build.py, cached) when the agent starts.  Without clang and the libbpf
  headers, or without libbpf, it stays usable but `available` is False and `unavailable` says why.
- `follow(before, after)` asks collector/agent/bpf/iter_plan.py which prefixes' open connections
  move (nothing to do: None, and nothing is loaded).  Otherwise it loads the object through libbpf
  (ctypes: no pin, nothing outlives the call), writes the iterator's tries, creates the iterator
  from a thread that joined network namespace `netns` (a TCP iterator walks the sockets of the
  namespace of the process that creates it), reads it to the end, and reads the program's
  counters.  The result is a `SwitchReport`; a failure is a report with `error` set, never an
  exception, because the config it follows is already applied.
- `run_iterator(obj, maps, netns)` is that one run (BpfMapError on failure).

Switching a connection's congestion control is bpf_setsockopt(TCP_CONGESTION) on a socket the
iterator holds locked: the connection goes on, nothing is reset or dropped.
"""

from __future__ import annotations

import ctypes
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from collector.agent.bpf.build import BpfBuildError, build_object
from collector.agent.bpf.iter_plan import (
    ENTRY,
    ITER_FUNCTION,
    ITER_KEY_SIZES,
    ITER_MAP_STATS,
    ITER_MAPS,
    ITER_PROGRAM,
    ITER_STATS,
    acting,
    iter_maps,
    switches_for,
)
from collector.agent.bpf.maps import BPF_MAP_TYPE_LPM_TRIE, BPF_MAP_TYPE_PERCPU_ARRAY, BpfMapError, PinnedMap, libbpf
from collector.agent.health import in_netns
from collector.agent.plan import InvalidConfig, Wanted

log = logging.getLogger("dyncc.agent")
READ_SIZE = 1 << 16


@dataclass
class SwitchReport:
    """One follow-up of a config change on the open connections."""

    prefixes: int  # prefixes whose open connections were to move
    counts: dict[str, int] = field(default_factory=dict)  # the iterator's counters (ITER_STATS names)
    seconds: float = 0.0
    error: str = ""  # why the iterator did not run (or failed); the connections keep their algorithm

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def switched(self) -> int:
        return self.counts.get("switched", 0)

    @property
    def failed(self) -> int:
        return self.counts.get("failed", 0)

    def summary(self) -> str:
        if self.error:
            return f"open connections of {self.prefixes} prefixes keep their algorithm until they close: {self.error}"
        c = self.counts
        return (
            f"open connections of {self.prefixes} prefixes: switched={self.switched} failed={self.failed} "
            f"already={c.get('already', 0)} below_threshold={c.get('below', 0)} (watched={c.get('watched', 0)}) "
            f"other_algorithm={c.get('other', 0)} (of {c.get('visited', 0)} TCP sockets) in {self.seconds:.3f}s"
        )


def _lib() -> ctypes.CDLL:
    """libbpf with the object, program and iterator functions declared (pointers as c_void_p)."""
    lib = libbpf()
    vp, ci, cs = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    for name, restype, argtypes in (
        ("bpf_object__open_file", vp, [cs, vp]),
        ("bpf_object__load", ci, [vp]),
        ("bpf_object__close", None, [vp]),
        ("bpf_object__find_map_by_name", vp, [vp, cs]),
        ("bpf_object__find_program_by_name", vp, [vp, cs]),
        ("bpf_map__fd", ci, [vp]),
        ("bpf_program__attach_iter", vp, [vp, vp]),
        ("bpf_link__fd", ci, [vp]),
        ("bpf_link__destroy", ci, [vp]),
        ("bpf_iter_create", ci, [ci]),
    ):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def _failure(what: str) -> BpfMapError:
    code = ctypes.get_errno()
    return BpfMapError(f"{what}: {os.strerror(code) if code else 'failed'} (libbpf's messages are on stderr)")


def _read_all(fd: int) -> int:
    total = 0
    while chunk := os.read(fd, READ_SIZE):
        total += len(chunk)
    return total


def run_iterator(obj: Path, maps: Mapping[str, Mapping[bytes, bytes]], netns: str | None) -> dict[str, int]:
    """Load `obj`, fill its tries with `maps`, read its TCP iterator once in `netns`; its counters."""
    lib = _lib()
    ctypes.set_errno(0)
    handle = lib.bpf_object__open_file(os.fsencode(obj), None)
    if not handle:
        raise _failure(f"cannot open BPF object {obj}")
    link = None
    try:
        rc = lib.bpf_object__load(handle)
        if rc != 0:
            ctypes.set_errno(-rc if rc < 0 else ctypes.get_errno())
            raise _failure(f"cannot load {obj.name}")

        def open_map(name: str, map_type: int, key_size: int, value_size: int) -> PinnedMap:
            found = lib.bpf_object__find_map_by_name(handle, name.encode())
            fd = lib.bpf_map__fd(found) if found else -1
            if fd < 0:
                raise BpfMapError(f"{obj.name} has no map {name}")
            return PinnedMap(Path(name), map_type=map_type, key_size=key_size, value_size=value_size, fd=fd)

        for name in ITER_MAPS:
            with open_map(name, BPF_MAP_TYPE_LPM_TRIE, ITER_KEY_SIZES[name], ENTRY.size) as trie:
                for key, value in maps.get(name, {}).items():
                    trie.put(key, value)
        prog = lib.bpf_object__find_program_by_name(handle, ITER_FUNCTION.encode())
        if not prog:
            raise BpfMapError(f"{obj.name} has no program {ITER_FUNCTION}")
        ctypes.set_errno(0)
        link = lib.bpf_program__attach_iter(prog, None)
        if not link:
            raise _failure("cannot attach the TCP iterator")
        link_fd = lib.bpf_link__fd(link)

        def walk() -> None:  # in the target namespace: the iterator walks the creator's namespace
            ctypes.set_errno(0)
            fd = lib.bpf_iter_create(link_fd)
            if fd < 0:
                ctypes.set_errno(-fd if fd < -1 else ctypes.get_errno())
                raise _failure("cannot create the TCP iterator")
            try:
                _read_all(fd)
            finally:
                os.close(fd)

        in_netns(netns, walk)
        with open_map(ITER_MAP_STATS, BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8) as stats:
            return dict(zip(ITER_STATS, stats.percpu_sums(), strict=False))
    finally:
        if link:
            lib.bpf_link__destroy(link)
        lib.bpf_object__close(handle)


class OpenConnections:
    """Follows config changes on the open connections of `netns` (None = the agent's own)."""

    def __init__(self, mode: str, netns: str | None, obj: Path | None, unavailable: str = "") -> None:
        self.mode = mode
        self.netns = netns
        self.obj = obj
        self.unavailable = unavailable if obj is None else ""

    @property
    def available(self) -> bool:
        return self.obj is not None

    @classmethod
    def for_agent(cls, mode: str, netns: str | None, build_dir: Path) -> OpenConnections:
        """Build the iterator now (cached); without the toolchain, an instance that says why."""
        try:
            libbpf()
            obj = build_object(build_dir, program=ITER_PROGRAM)
        except (BpfBuildError, OSError) as exc:  # BpfMapError (no libbpf) is an OSError
            return cls(mode, netns, None, f"no BPF toolchain ({exc})")
        return cls(mode, netns, obj)

    def follow(self, before: Mapping[str, Wanted], after: Mapping[str, Wanted]) -> SwitchReport | None:
        """Switch what the change from `before` to `after` asks for; None when it asks nothing."""
        started = time.monotonic()
        try:
            switches = switches_for(self.mode, before, after)
            if not switches:
                return None
            report = SwitchReport(acting(switches))
            maps = iter_maps(switches)
        except (InvalidConfig, ValueError) as exc:
            return SwitchReport(0, error=str(exc), seconds=time.monotonic() - started)
        if self.obj is None:
            report.error = self.unavailable or "no iterator object"
        else:
            try:
                report.counts = run_iterator(self.obj, maps, self.netns)
            except Exception as exc:  # the config is applied already: report, never raise
                report.error = str(exc) or type(exc).__name__
        report.seconds = time.monotonic() - started
        return report
