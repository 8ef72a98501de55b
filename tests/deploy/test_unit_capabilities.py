"""Each edge unit's capability set is enough, and each capability in it is needed (issue 37).

The commands run as an unprivileged user (65534) under `setpriv` with exactly the bounding,
inheritable and ambient set that deploy/systemd/dyncc-NAME.service gives (read from the unit), and
again with one capability taken away: `dyncc collect --once --netns` dumps a namespace's socket
only with CAP_SYS_ADMIN (and the own namespace with no capability at all), `dyncc agent --from-file
--once` installs its routes only with CAP_NET_ADMIN, and its kill switch moves an open BBR
connection back to CUBIC (the TCP iterator) only with CAP_BPF and CAP_PERFMON.  Namespaces and
processes this test makes are removed on failure too (tests/support/netns_util.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent_lab import POP, Lab, build_lab
from tests.support.netns_util import REPO, namespaces, new_ns_name, ns_sh

pytestmark = pytest.mark.netns
UNITS = REPO / "deploy" / "systemd"
NOBODY = 65534
PORT = 18437


def unit_capabilities(name: str) -> list[str]:
    """The unit's CapabilityBoundingSet= (the test of test_unit_hardening.py: Ambient is the same)."""
    for line in (UNITS / f"dyncc-{name}.service").read_text().splitlines():
        if line.startswith("CapabilityBoundingSet="):
            return line.split("=", 1)[1].split()
    raise AssertionError(f"dyncc-{name}.service has no CapabilityBoundingSet=")


def setpriv(
    caps: list[str], *cmd: str, netns: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`cmd` as user 65534 holding exactly `caps` (bounding, inheritable, ambient), in `netns` if given."""
    spec = "-all" + "".join(f",+{c.removeprefix('CAP_').lower()}" for c in caps)
    argv = [
        "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--no-new-privs",
        f"--inh-caps={spec}", f"--ambient-caps={spec}", f"--bounding-set={spec}",
        "--", "env", "PYTHONDONTWRITEBYTECODE=1", *cmd,
    ]  # fmt: skip
    if netns is not None:
        argv = ["ip", "netns", "exec", netns, *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def dyncc(*args: str) -> list[str]:
    return [sys.executable, "-m", "dyncc.cli", *args]


def without(caps: list[str], cap: str) -> list[str]:
    assert cap in caps, (cap, caps)
    return [c for c in caps if c != cap]


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory user 65534 can enter (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="dyncc-caps-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_the_capability_set_is_the_process_s_one() -> None:
    done = setpriv(unit_capabilities("agent"), "grep", "^Cap", "/proc/self/status")
    fields = dict(line.split(":\t") for line in done.stdout.splitlines())
    bits = {"CAP_NET_ADMIN": 12, "CAP_SYS_ADMIN": 21, "CAP_PERFMON": 38, "CAP_BPF": 39}
    want = sum(1 << bits[c] for c in unit_capabilities("agent"))
    assert {k: int(v, 16) for k, v in fields.items()} == {
        "CapInh": want, "CapPrm": want, "CapEff": want, "CapBnd": want, "CapAmb": want,
    }  # fmt: skip


@pytest.fixture
def socket_ns() -> Iterator[str]:
    """A namespace holding one established loopback TCP connection on PORT."""
    with namespaces([new_ns_name("d37c")]) as (ns,):
        holder = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-c",
             "import socket, sys\n"
             f"s = socket.socket(); s.bind(('127.0.0.1', {PORT})); s.listen()\n"
             f"c = socket.create_connection(('127.0.0.1', {PORT})); a, _ = s.accept()\n"
             "print('ready', flush=True); sys.stdin.read()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
            yield ns
        finally:
            holder.kill()
            holder.wait(timeout=10)


def collected(done: subprocess.CompletedProcess[str]) -> list[dict]:
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_collect_enters_other_namespaces_with_cap_sys_admin_and_needs_it(socket_ns: str) -> None:
    caps = unit_capabilities("collect")
    assert caps == ["CAP_SYS_ADMIN"]
    args = dyncc("collect", "--once", "--sink", "stdout", "--port", str(PORT), "--no-default-excludes")
    done = setpriv(caps, *args, "--netns", socket_ns)
    assert done.returncode == 0, done.stderr
    rows = collected(done)
    assert [(r["netns"], r["src_port"], r["state_name"]) for r in rows] == [(socket_ns, PORT, "established")]
    assert rows[0]["tcp_info_len"] > 0 and rows[0]["rto"] > 0  # tcp_info itself, no CAP_NET_ADMIN
    refused = setpriv(without(caps, "CAP_SYS_ADMIN"), *args, "--netns", socket_ns)
    assert collected(refused) == [] and "cannot enter network namespace" in refused.stderr, refused.stderr
    # its own namespace: no capability at all
    own = setpriv([], *args, netns=socket_ns)
    assert [(r["src_port"], r["state_name"]) for r in collected(own)] == [(PORT, "established")], own.stderr


@pytest.fixture
def lab(shared_dir: Path) -> Iterator[Lab]:
    with build_lab(shared_dir, prefix="d37a") as made:
        made.state_dir.mkdir()
        os.chown(made.state_dir, NOBODY, NOBODY)
        yield made


def agent_once(lab: Lab, caps: list[str], version: int, prefixes: list[str], kill: bool = False) -> dict:
    path = lab.state_dir.parent / f"config-{version}.pb"
    path.write_bytes(lab.config(version, prefixes, kill=kill).SerializeToString())
    args = ["agent", "--from-file", str(path), "--once", "--pop", POP, "--public-key", str(lab.public_key_path)]
    done = setpriv(caps, *dyncc(*args, "--state-dir", str(lab.state_dir)), netns=lab.edge)
    assert done.stdout.strip(), done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]), returncode=done.returncode, stderr=done.stderr)


def test_agent_applies_routes_with_cap_net_admin_and_needs_it(lab: Lab) -> None:
    caps = unit_capabilities("agent")
    refused = agent_once(lab, without(caps, "CAP_NET_ADMIN"), 1, ["198.51.100.0/24"])
    assert refused["returncode"] != 0 and refused["result"] != "APPLIED", refused
    assert lab.owned_json() == []
    applied = agent_once(lab, caps, 2, ["198.51.100.0/24", "2001:db8:100::/56"])
    assert (applied["returncode"], applied["result"], applied["routes_added"]) == (0, "APPLIED", 2), applied
    assert sorted(r["dst"] for r in lab.owned_json()) == ["198.51.100.0/24", "2001:db8:100::/56"]
    lines = lab.owned_text().strip().splitlines()
    assert len(lines) == 2 and all("congctl bbr" in line for line in lines), lines


def holder(ns: str, code: str) -> subprocess.Popen[str]:
    """`code` (Python) in `ns`, kept running until killed; it prints "ready" once set up."""
    proc = subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-c", code + "\nprint('ready', flush=True)\nsys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def edge_algorithm(lab: Lab) -> str:
    """The congestion control of the edge's one connection to 198.51.100.10 (`ss -ti`)."""
    out = ns_sh(lab.edge, "ss", "-tinH", "dst", "198.51.100.10")
    names = [n for n in ("bbr", "cubic") if f" {n} " in f" {out} "]
    assert len(names) == 1, out
    return names[0]


def test_agent_kill_switch_moves_open_connections_with_cap_bpf_and_cap_perfmon(lab: Lab) -> None:
    caps = unit_capabilities("agent")
    applied = agent_once(lab, caps, 1, ["198.51.100.0/24"])
    assert applied["result"] == "APPLIED", applied
    procs = [
        holder(lab.client_a, f"import socket, sys\ns = socket.socket(); s.bind(('198.51.100.10', {PORT})); s.listen()"),
        holder(lab.edge, f"import socket, sys\nc = socket.create_connection(('198.51.100.10', {PORT}), timeout=10)"),
    ]
    try:
        assert edge_algorithm(lab) == "bbr"  # the route's congctl
        for cap in ("CAP_BPF", "CAP_PERFMON"):  # the iterator cannot run: the connection keeps BBR
            agent_once(lab, caps, 2 if cap == "CAP_BPF" else 4, ["198.51.100.0/24"])
            killed = agent_once(lab, without(caps, cap), 3 if cap == "CAP_BPF" else 5, [], kill=True)
            assert killed["result"] == "APPLIED", killed
            assert [e for e in killed.get("errors", []) if "keep their algorithm" in e and "cannot load" in e], killed
            assert edge_algorithm(lab) == "bbr", cap
        agent_once(lab, caps, 6, ["198.51.100.0/24"])
        killed = agent_once(lab, caps, 7, [], kill=True)
        assert killed["result"] == "APPLIED" and not killed.get("errors"), killed
        assert edge_algorithm(lab) == "cubic"
        assert lab.owned_json() == []
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
