"""Ctrl-C on `dyncc lab`: SIGINT to the command's whole process group (what a terminal sends) while
the fleet lab runs leaves no namespace, process or qdisc of the run behind, and the command ends
with 130 after its summary.  Root only, about a minute."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dyncc.lab import topology as lab_topology
from tests.support.netns_util import require_root

pytestmark = [pytest.mark.slow, pytest.mark.netns]


def _netns_inode(name: str) -> int | None:
    try:
        return os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return None


def _pids_in_netns(inodes: set[int]) -> list[tuple[int, str]]:
    """Processes whose network namespace is one of `inodes` (a deleted namespace lives on in them)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            link = os.readlink(f"/proc/{entry}/ns/net")
            args = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        m = re.fullmatch(r"net:\[(\d+)\]", link)
        if m and int(m.group(1)) in inodes:
            out.append((int(entry), args))
    return out


def test_sigint_to_the_process_group_tears_the_fleet_lab_down(tmp_path: Path):
    require_root()
    run_id = secrets.token_hex(3)
    log_path = tmp_path / "lab.out"
    cmd = [
        sys.executable,
        "-m",
        "dyncc.cli",
        "lab",
        *("--rounds", "6", "--round-seconds", "10", "--run-id", run_id),
        *("--store-dir", str(tmp_path / "chdb")),
    ]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    inodes: set[int] = set()
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and proc.poll() is None:
            text = log_path.read_text(errors="replace")
            for name in lab_topology.lab_namespaces(f"dlab-{run_id}"):
                ino = _netns_inode(name)
                if ino is not None:
                    inodes.add(ino)
            if re.search(r"^round 1\b", text, re.M):
                break
            time.sleep(0.5)
        assert proc.poll() is None, log_path.read_text(errors="replace")
        assert re.search(r"^round 1\b", log_path.read_text(errors="replace"), re.M), "no round in 150 s"
        names = lab_topology.lab_namespaces(f"dlab-{run_id}")
        inodes |= {i for i in map(_netns_inode, names) if i is not None}
        assert len(names) >= 10 and _pids_in_netns(inodes), names  # the lab runs: nginx, clients, relay
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole foreground group
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            lab_topology.destroy(lab_topology.lab_namespaces(f"dlab-{run_id}"))
    text = log_path.read_text(errors="replace")
    assert rc == 130, text
    assert "namespaces left: none" in text, text
    assert lab_topology.lab_namespaces(f"dlab-{run_id}") == []
    assert _pids_in_netns(inodes) == [], text
    m = re.search(r"lab files \(store, keys, configs, logs\): (\S+)", text)
    assert m, text
    workdir = m.group(1)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert workdir not in ps and run_id not in ps, ps
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert run_id not in links  # nothing of the run in the host's own namespace either
