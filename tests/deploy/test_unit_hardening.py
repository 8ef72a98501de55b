"""The systemd units of deploy/systemd/, measured: `systemd-analyze security --offline=true` rates
every unit at an exposure of at most 2.5 (issue 37; before: control and ingest 4.1, agent and
collect 4.7), each sets the settings the issue names, and each capability set is the one the unit
comment and tests/deploy/test_unit_capabilities.py state."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
BOUND = 2.5
NAMES = ("agent", "collect", "control", "ingest")
#: what each unit may hold: nothing more (CapabilityBoundingSet=) and nothing less (Ambient)
CAPABILITIES = {
    "agent": {"CAP_NET_ADMIN", "CAP_BPF", "CAP_PERFMON"},
    "collect": {"CAP_SYS_ADMIN"},
    "control": set(),
    "ingest": set(),
}


def unit_path(name: str) -> Path:
    return UNITS / f"dyncc-{name}.service"


def settings(name: str) -> dict[str, list[str]]:
    """Each `Key=value` line of the unit, values in order (a key may repeat)."""
    out: dict[str, list[str]] = {}
    for line in unit_path(name).read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def capabilities(name: str, key: str) -> set[str]:
    return {c for value in settings(name).get(key, []) for c in value.split()}


def exposure(name: str) -> float:
    """The overall exposure `systemd-analyze security --offline=true` gives the unit."""
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze not found (Debian's systemd package)")
    done = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--no-pager", str(unit_path(name))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", done.stdout)
    assert match is not None, (done.returncode, done.stdout[-2000:], done.stderr)
    return float(match.group(1))


@pytest.mark.parametrize("name", NAMES)
def test_every_unit_is_at_most_the_bound(name: str) -> None:
    score = exposure(name)
    assert score <= BOUND, f"dyncc-{name}.service: exposure {score} > {BOUND}"


@pytest.mark.parametrize("name", NAMES)
def test_every_unit_sets_the_named_hardening(name: str) -> None:
    unit = settings(name)
    for key in ("SystemCallFilter", "ProtectKernelLogs", "ProtectProc", "UMask", "NoNewPrivileges"):
        assert key in unit, f"dyncc-{name}.service has no {key}="
    assert unit["ProtectProc"] == ["invisible"] and unit["UMask"] == ["0077"]
    assert unit["SystemCallFilter"][0].startswith("@system-service")
    assert unit["User"] == [f"dyncc-{'edge' if name in ('agent', 'collect') else 'central'}"]
    assert unit["StateDirectory"] == [f"dyncc/{name}"]


@pytest.mark.parametrize("name", NAMES)
def test_capabilities_are_exactly_the_needed_ones(name: str) -> None:
    assert capabilities(name, "CapabilityBoundingSet") == CAPABILITIES[name]
    assert capabilities(name, "AmbientCapabilities") == CAPABILITIES[name]


def test_the_measure_fails_a_unit_above_the_bound(tmp_path: Path) -> None:
    """The bound bites: a unit without the hardening settings is rated above it."""
    loose = tmp_path / "dyncc-loose.service"
    loose.write_text("[Service]\nExecStart=/bin/true\nAmbientCapabilities=CAP_NET_ADMIN\n")
    done = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--no-pager", str(loose)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", done.stdout)
    assert match is not None and float(match.group(1)) > BOUND
