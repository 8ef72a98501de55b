"""deploy/lab/lab.sh install (what `make demo` runs as root) and its apt helper in deploy/lib.sh:
the lab's packages are installed with no service of theirs enabled at boot or running.

The first test runs the real install step; it can run only where the install can (root, Debian,
apt-get) and skips elsewhere with the reason.  On a machine that has the packages already
(`make test` installs them first) it installs nothing and takes a second; it then checks every
unit and SysV script that the packages and their installed dependencies ship.  The other tests
run the helper's pieces on a scratch directory (no root, nothing installed).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAB_SH = REPO / "deploy" / "lab" / "lab.sh"
LIB_SH = REPO / "deploy" / "lib.sh"
POLICY_RC = Path("/usr/sbin/policy-rc.d")
UNIT = re.compile(r"/systemd/system/[^/]+\.(service|socket|timer|path)$")


def lab_packages() -> list[str]:
    """PACKAGES=(...) of deploy/lab/lab.sh: the one list of the lab's packages."""
    m = re.search(r"^PACKAGES=\(([^)]*)\)", LAB_SH.read_text(), re.M)
    assert m, "no PACKAGES=(...) in deploy/lab/lab.sh"
    return m.group(1).split()


def skip_unless_install_can_run() -> None:
    if os.geteuid() != 0:
        pytest.skip("lab.sh install needs root (apt-get); run the suite as root to check it")
    if not Path("/etc/debian_version").exists():
        pytest.skip("lab.sh install is for Debian (apt-get, dpkg); this is not a Debian system")
    for tool in ("apt-get", "apt-cache", "dpkg-query", "dpkg"):
        if shutil.which(tool) is None:
            pytest.skip(f"lab.sh install needs {tool}, which is not on PATH")


def installed_closure(packages: list[str]) -> list[str]:
    """`packages` and, recursively, the installed packages they depend on (Depends, Pre-Depends;
    every installed alternative; virtual packages through Provides), from one dpkg-query."""
    rows = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package}\t${db:Status-Abbrev}\t${Provides}\t${Depends}, ${Pre-Depends}\n"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    depends: dict[str, list[str]] = {}
    provided: dict[str, list[str]] = {}

    def names(field: str) -> list[str]:
        return [re.split(r"[\s:(]", alt.strip(), maxsplit=1)[0] for alt in re.split(r"[,|]", field) if alt.strip()]

    for row in rows:
        name, status, provides, deps = [*row.split("\t"), "", "", ""][:4]
        if not status.startswith("ii"):
            continue
        depends[name] = names(deps)
        for virtual in names(provides):
            provided.setdefault(virtual, []).append(name)
    seen: set[str] = set()
    todo = list(packages)
    while todo:
        name = todo.pop()
        for real in [name] if name in depends else provided.get(name, []):
            if real not in seen:
                seen.add(real)
                todo.extend(depends[real])
    return sorted(seen)


def shipped_services(packages: list[str]) -> tuple[list[str], list[str]]:
    """(systemd units, SysV scripts) shipped by `packages` and their installed dependencies."""
    files = subprocess.run(
        ["dpkg", "-L", *installed_closure(packages)], capture_output=True, text=True
    ).stdout.splitlines()
    units = sorted({Path(f).name for f in files if UNIT.search(f)})
    scripts = sorted({Path(f).name for f in files if f.startswith("/etc/init.d/") and f != "/etc/init.d/"})
    return units, scripts


def enabled_links(unit: str) -> list[Path]:
    """The symlinks that start `unit` at boot (systemd's .wants / .requires directories)."""
    etc = Path("/etc/systemd/system")
    return sorted([*etc.glob(f"*.wants/{unit}"), *etc.glob(f"*.requires/{unit}")])


def test_lab_install_leaves_no_service_enabled_or_running() -> None:
    skip_unless_install_can_run()
    policy_before = POLICY_RC.read_bytes() if POLICY_RC.exists() else None
    proc = subprocess.run(["bash", str(LAB_SH), "install"], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "lab packages installed" in proc.stderr
    # the install's own policy-rc.d is gone again, and one that was there is as it was
    assert (POLICY_RC.read_bytes() if POLICY_RC.exists() else None) == policy_before
    assert not Path(f"{POLICY_RC}.dyncc-saved").exists()

    units, scripts = shipped_services(lab_packages())
    assert "nginx.service" in units, units  # nginx-common's: the one the issue found enabled
    systemd_runs = Path("/run/systemd/system").is_dir()
    systemctl = shutil.which("systemctl")
    fix = "(enabled by this install, or by one before deploy/lib.sh disabled it: systemctl disable it)"
    for unit in units:
        assert not enabled_links(unit), f"{unit} is enabled at boot: {enabled_links(unit)} {fix}"
        if systemctl:  # works offline too: it reads the same links
            state = subprocess.run([systemctl, "is-enabled", unit], capture_output=True, text=True).stdout.strip()
            assert state not in ("enabled", "enabled-runtime", "linked", "alias"), f"{unit}: {state} {fix}"
        if systemd_runs:
            active = subprocess.run(["systemctl", "is-active", unit], capture_output=True, text=True).stdout.strip()
            assert active not in ("active", "activating", "reloading"), f"{unit} is {active}"
    for script in scripts:
        starts = sorted(p.name for p in Path("/etc").glob(f"rc[S2-5].d/S[0-9][0-9]{script}"))
        assert not starts, f"/etc/init.d/{script} starts at boot: {starts} {fix}"
    # a system-wide nginx (the package's, not one of the lab's with its own -c config) is not running
    pid_file = Path("/run/nginx.pid")
    if pid_file.exists() and pid_file.read_text().strip().isdigit():
        assert not Path(f"/proc/{pid_file.read_text().strip()}").exists(), "the system-wide nginx is running"


def lib(script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `script` in bash with deploy/lib.sh sourced (set -euo pipefail, as the deploy scripts)."""
    code = f"set -euo pipefail; _dyncc_tag=t; source {LIB_SH}; {script}"
    return subprocess.run(["bash", "-c", code], capture_output=True, text=True, env={**os.environ, **(env or {})})


def test_disable_new_at_boot_disables_what_the_install_enabled_only(tmp_path: Path) -> None:
    if shutil.which("systemctl") is None:
        pytest.skip("systemctl is not installed (disable_new_at_boot uses `systemctl --root` on a scratch root)")
    units = tmp_path / "lib" / "systemd" / "system"
    wants = tmp_path / "etc" / "systemd" / "system" / "multi-user.target.wants"
    units.mkdir(parents=True)
    wants.mkdir(parents=True)
    for name in ("theirs.service", "fresh.service"):
        (units / name).write_text("[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n")
    (wants / "theirs.service").symlink_to("/lib/systemd/system/theirs.service")
    env = {"DYNCC_SYSROOT": str(tmp_path)}
    before = tmp_path / "before"
    assert lib(f"enabled_at_boot > {before}", env).returncode == 0
    assert before.read_text() == "theirs.service\n"
    # the "install" enables a unit and a SysV script
    (wants / "fresh.service").symlink_to("/lib/systemd/system/fresh.service")
    assert lib("enabled_at_boot", env).stdout == "fresh.service\ntheirs.service\n"
    done = lib(f"disable_new_at_boot {before}", env)
    assert done.returncode == 0, done.stderr
    assert "disabling fresh.service" in done.stderr
    assert not (wants / "fresh.service").exists() and (wants / "theirs.service").is_symlink()
    (tmp_path / "etc" / "rc2.d").mkdir(parents=True)
    (tmp_path / "etc" / "rc2.d" / "S01web").symlink_to("../init.d/web")
    assert lib("enabled_at_boot", env).stdout == "sysv:web\ntheirs.service\n"
    left = lib(f"disable_new_at_boot {before}", env)  # on a scratch root SysV links are only reported
    assert left.returncode == 1 and "still enabled at boot after the install: sysv:web" in left.stderr


@pytest.mark.parametrize("existing", [None, "exit 0", "exit 101"])
def test_service_starts_are_denied_during_the_install_and_the_policy_restored(
    tmp_path: Path, existing: str | None
) -> None:
    policy = tmp_path / "policy-rc.d"
    if existing is not None:
        policy.write_text(f"#!/bin/sh\n{existing}\n")
        policy.chmod(0o755)
    original = policy.read_bytes() if existing is not None else None
    probe = f'POLICY_RC={policy}; deny_service_starts; rc=0; "$POLICY_RC" nginx start || rc=$?; echo "$rc"'
    denied = lib(probe)
    assert denied.returncode == 0, denied.stderr
    assert denied.stdout.strip() == "101"  # invoke-rc.d / deb-systemd-invoke: action forbidden
    # an interrupted install left its policy (and the set-aside original): the next run repairs it
    restored = lib(f"POLICY_RC={policy}; deny_service_starts; allow_service_starts")
    assert restored.returncode == 0, restored.stderr
    assert (policy.read_bytes() if policy.exists() else None) == original
    assert not (tmp_path / "policy-rc.d.dyncc-saved").exists()


def test_apt_options_install_nothing_else() -> None:
    """No Recommends, no upgrade of named packages, no upgrade of a whole source package."""
    opts = lib('printf "%s\\n" "${APT_INSTALL_OPTS[@]}"').stdout.split()
    assert "--no-install-recommends" in opts and "--no-upgrade" in opts
    assert "APT::Get::Upgrade-By-Source-Package=false" in opts
