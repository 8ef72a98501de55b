"""Test hosts in network namespaces this test run creates (iproute2), cleaned up on exit.

Only documentation addresses (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24,
2001:db8::/32) and loopback are used.  Namespace names carry a caller prefix
plus a random suffix so parallel tests never collide.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root for network namespaces")


def sh(*cmd: str, check: bool = True, timeout: float = 30) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def ns_sh(ns: str, *cmd: str, check: bool = True, timeout: float = 30) -> str:
    return sh("ip", "netns", "exec", ns, *cmd, check=check, timeout=timeout)


def new_ns_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@contextmanager
def namespaces(names: Sequence[str]) -> Iterator[list[str]]:
    """Create the namespaces (loopback up), yield them, delete them afterwards."""
    made: list[str] = []
    try:
        for name in names:
            sh("ip", "netns", "add", name)
            made.append(name)
            ns_sh(name, "ip", "link", "set", "lo", "up")
        yield made
    finally:
        for name in made:
            sh("ip", "netns", "pids", name, check=False)
            pids = sh("ip", "netns", "pids", name, check=False).split()
            for pid in pids:
                sh("kill", "-9", pid, check=False)
            sh("ip", "netns", "del", name, check=False)


def veth_pair(ns_a: str, if_a: str, ns_b: str, if_b: str) -> None:
    """A veth between two namespaces, both ends up."""
    tmp_a, tmp_b = f"v{uuid.uuid4().hex[:8]}", f"v{uuid.uuid4().hex[:8]}"
    sh("ip", "link", "add", tmp_a, "type", "veth", "peer", "name", tmp_b)
    sh("ip", "link", "set", tmp_a, "netns", ns_a)
    sh("ip", "link", "set", tmp_b, "netns", ns_b)
    ns_sh(ns_a, "ip", "link", "set", tmp_a, "name", if_a)
    ns_sh(ns_b, "ip", "link", "set", tmp_b, "name", if_b)
    ns_sh(ns_a, "ip", "link", "set", if_a, "up")
    ns_sh(ns_b, "ip", "link", "set", if_b, "up")


REPO = Path(__file__).resolve().parents[2]


def start_ready(ns: str, module: str, *args: str) -> subprocess.Popen[str]:
    """Run `python -m module args` in namespace `ns` and wait for its first line, "ready"."""
    proc = subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-m", module, *args],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", f"helper {args[0] if args else module} failed: {line!r}"
    return proc
