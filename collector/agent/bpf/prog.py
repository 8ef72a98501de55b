"""The sock_ops program's life cycle through bpftool: load and pin, attach, detach, remove.

`BpfProgram(pin_dir, cgroup, obj)` owns one bpffs directory:

    <pin_dir>/cc_switch-<hash>   the program (hash = the object's content), at most one in use
    <pin_dir>/dyncc_v4, dyncc_v6, dyncc_stats   its maps

- `ensure_loaded()` loads the object as a sockops program and pins it, reusing the pinned
  maps when they exist (`bpftool prog load ... map name X pinned P`) or pinning new ones
  (`pinmaps`); an existing pin of the same object is kept as it is.
- `ensure_attached()` attaches it to the cgroup v2 directory (`bpftool cgroup attach CGROUP
  sock_ops pinned P multi`: other sock_ops programs of the cgroup keep running) unless it is
  attached already, then detaches and unpins any other `cc_switch-*` program of the pin
  directory (an older version).
- `remove()` detaches every program of the pin directory and removes the directory.

Programs attached with BPF_PROG_ATTACH stay attached when the agent exits: enforcement does not
depend on the agent process.  Errors are BpfProgramError with bpftool's message.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from collector.agent.bpf.plan import MAP_STATS, PROGRAM, SELECTION_MAPS
from dyncc_common.errors import DynccError

BPFTOOL = "bpftool"
MAPS = (*SELECTION_MAPS, MAP_STATS)
BPFFS = Path("/sys/fs/bpf")


class BpfProgramError(DynccError, OSError):
    """A bpftool step failed (or bpftool is missing); one line."""


def bpftool(*args: str, timeout: float = 30) -> Any:
    """Run `bpftool -j ARGS`; its JSON output (None when empty)."""
    cmd = [BPFTOOL, "-j", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as exc:
        raise BpfProgramError("bpftool not found: install bpftool (deploy/lab/lab.sh install)") from exc
    except subprocess.TimeoutExpired as exc:
        raise BpfProgramError(f"bpftool {' '.join(args[:2])} took more than {timeout:g} s") from exc
    out = proc.stdout.strip()
    data: Any = None
    for text in (out, out.splitlines()[-1] if out else ""):
        with contextlib.suppress(json.JSONDecodeError):
            data = json.loads(text)
            break
    if proc.returncode != 0:
        message = data.get("error") if isinstance(data, dict) else None
        message = message or proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        text = message if isinstance(message, str) else message[0]
        raise BpfProgramError(f"bpftool {' '.join(args[:2])} failed: {text}")
    return data


def mounts(kind: str) -> list[Path]:
    """Mount points of filesystem type `kind` (from /proc/self/mounts)."""
    found = []
    try:
        text = Path("/proc/self/mounts").read_text()
    except OSError:
        return []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == kind:
            found.append(Path(fields[1].replace("\\040", " ")))
    return found


def default_cgroup() -> Path | None:
    """The first cgroup v2 mount (the unified hierarchy's root)."""
    found = mounts("cgroup2")
    return found[0] if found else None


def ensure_bpffs(pin_dir: Path) -> None:
    """Mount bpffs on /sys/fs/bpf when `pin_dir` is below it and nothing is mounted there."""
    if any(pin_dir == m or m in pin_dir.parents for m in mounts("bpf")):
        return
    if BPFFS not in pin_dir.parents:
        raise BpfProgramError(f"{pin_dir} is not on a bpffs mount (mount -t bpf bpf DIR)")
    proc = subprocess.run(["mount", "-t", "bpf", "bpf", str(BPFFS)], capture_output=True, text=True, timeout=10)
    if proc.returncode != 0:
        raise BpfProgramError(f"cannot mount bpffs on {BPFFS}: {proc.stderr.strip()}")


def object_hash(obj: Path) -> str:
    try:
        return hashlib.sha256(obj.read_bytes()).hexdigest()[:16]
    except OSError as exc:
        raise BpfProgramError(f"cannot read BPF object {obj}: {exc.strerror}") from exc


class BpfProgram:
    def __init__(self, pin_dir: Path, cgroup: Path, obj: Path | None) -> None:
        self.pin_dir = pin_dir
        self.cgroup = cgroup
        self.obj = obj  # None: manage what is pinned (remove, read) but never load
        self.prog_pin = pin_dir / f"{PROGRAM}-{object_hash(obj)}" if obj is not None else None

    def map_path(self, name: str) -> Path:
        return self.pin_dir / name

    def loaded(self) -> bool:
        """All maps are pinned (the program may or may not be)."""
        return all(self.map_path(name).exists() for name in MAPS)

    def program_pins(self) -> list[Path]:
        try:
            return sorted(p for p in self.pin_dir.iterdir() if p.name.startswith(f"{PROGRAM}-"))
        except FileNotFoundError:
            return []

    def ensure_loaded(self) -> None:
        if self.prog_pin is None or self.obj is None:
            raise BpfProgramError("no BPF object to load")
        if self.prog_pin.exists() and self.loaded():
            return
        ensure_bpffs(self.pin_dir)
        try:
            self.pin_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BpfProgramError(f"cannot create pin directory {self.pin_dir}: {exc.strerror}") from exc
        with contextlib.suppress(FileNotFoundError):
            self.prog_pin.unlink()  # maps missing: load again
        pinned = [name for name in MAPS if self.map_path(name).exists()]
        if pinned and len(pinned) != len(MAPS):
            missing = sorted(set(MAPS) - set(pinned))
            raise BpfProgramError(f"{self.pin_dir} lacks {', '.join(missing)}: run the kill switch or remove it")
        args = ["prog", "load", str(self.obj), str(self.prog_pin), "type", "sockops"]
        if pinned:
            for name in MAPS:
                args += ["map", "name", name, "pinned", str(self.map_path(name))]
        else:
            args += ["pinmaps", str(self.pin_dir)]
        bpftool(*args)

    def prog_id(self, pin: Path) -> int:
        data = bpftool("prog", "show", "pinned", str(pin))
        return int(data["id"])

    def attached_ids(self) -> set[int]:
        """Programs attached to the cgroup for sock_ops (directly, not inherited)."""
        data = bpftool("cgroup", "show", str(self.cgroup)) or []
        return {int(p["id"]) for p in data if p.get("attach_type") in ("sock_ops", "cgroup_sock_ops")}

    def attached(self) -> bool:
        if self.prog_pin is None or not self.prog_pin.exists():
            return any(self.prog_id(pin) in self.attached_ids() for pin in self.program_pins())
        return self.prog_id(self.prog_pin) in self.attached_ids()

    def ensure_attached(self) -> None:
        if self.prog_pin is None:
            raise BpfProgramError("no BPF object to attach")
        ids = self.attached_ids()
        if self.prog_id(self.prog_pin) not in ids:
            bpftool("cgroup", "attach", str(self.cgroup), "sock_ops", "pinned", str(self.prog_pin), "multi")
        for pin in self.program_pins():
            if pin != self.prog_pin:
                self._drop(pin, ids)

    def _drop(self, pin: Path, ids: set[int]) -> None:
        if self.prog_id(pin) in ids:
            bpftool("cgroup", "detach", str(self.cgroup), "sock_ops", "pinned", str(pin))
        pin.unlink()

    def remove(self) -> None:
        """Detach every program of the pin directory from the cgroup, then remove the directory."""
        if not self.pin_dir.exists():
            return
        ids = self.attached_ids() if self.cgroup.exists() else set()
        for pin in self.program_pins():
            self._drop(pin, ids)
        for name in MAPS:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.map_path(name))
        with contextlib.suppress(OSError):  # something else pinned there: leave it
            self.pin_dir.rmdir()
