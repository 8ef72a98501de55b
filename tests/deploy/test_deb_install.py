"""dyncc-edge and dyncc-central tested as installed (issue 37): `make deb`'s packages go into a
throwaway Debian root that the test makes, are run from the installed files, upgraded and purged.

The throwaway root is this host's own Debian 12 seen through an overlay (lower: /, upper: a tmpfs)
in a private mount namespace that a holder process keeps; every step runs in it with `nsenter -m`
and `chroot`, so dpkg, the maintainer scripts and sysusers change the upper layer only, and all of
it goes when the holder ends (on failure too).  The packages come from deploy/deb/build.sh into the
test's directory (several minutes: it reaches PyPI), or from DYNCC_TEST_DEB_DIR when set (the .deb
files of `make deb`).  The "newer build" for the upgrade is the same package with its Version
raised (dpkg-deb -R / -b), the edited conffile and the agent's state directory must outlive it.

Its own CI part, `make test-deb` (about 8 minutes: the build, lintian, the install): `make test`
skips it unless DYNCC_TEST_DEB=1 or DYNCC_TEST_DEB_DIR is set, to keep the suite under its time.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.netns_util import REPO

pytestmark = pytest.mark.slow
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
DEB_VERSION = f"{VERSION}-1"
NEWER = f"{VERSION}-2"


def run(*cmd: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


@dataclass
class Debs:
    edge: Path
    central: Path


@pytest.fixture(scope="module")
def debs() -> Iterator[Debs]:
    if os.geteuid() != 0:
        pytest.skip("needs root (dpkg, mount namespaces)")
    given = os.environ.get("DYNCC_TEST_DEB_DIR")
    if not given and os.environ.get("DYNCC_TEST_DEB") != "1":
        pytest.skip("the package install test is its own CI part: make test-deb (or DYNCC_TEST_DEB=1)")
    out = Path(given) if given else Path(tempfile.mkdtemp(prefix="dyncc-deb-"))
    try:
        if not given:
            env = dict(os.environ, DYNCC_DEB_OUT=str(out), DYNCC_DEB_VERSION=DEB_VERSION, DYNCC_DEB_LINTIAN="1")
            done = subprocess.run(
                ["bash", "deploy/deb/build.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=3600
            )
            assert done.returncode == 0, done.stderr[-4000:]
        yield Debs(out / f"dyncc-edge_{DEB_VERSION}_amd64.deb", out / f"dyncc-central_{DEB_VERSION}_amd64.deb")
    finally:
        if not given:
            shutil.rmtree(out, ignore_errors=True)


class Root:
    """The throwaway root: an overlay of / kept by a holder process in its own mount namespace."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.path = base / "root"
        script = (
            'set -e; mount -t tmpfs -o size=4g dyncc-deb-test "$0/layer"; mkdir "$0/layer/upper" "$0/layer/work";'
            ' mount -t overlay overlay -o "lowerdir=/,upperdir=$0/layer/upper,workdir=$0/layer/work" "$0/root";'
            ' mount -t proc proc "$0/root/proc"; mount --rbind /dev "$0/root/dev";'
            ' mount -t tmpfs tmpfs "$0/root/tmp"; mount -t tmpfs tmpfs "$0/root/run";'
            " echo ready; exec sleep infinity"
        )
        (base / "layer").mkdir()
        self.path.mkdir()
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(base)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.holder.stdout is not None
        line = self.holder.stdout.readline().strip()
        if line != "ready":
            self.close()
            raise AssertionError(f"no throwaway root: {self.holder.stderr.read() if self.holder.stderr else ''}")

    def sh(self, script: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        """`script` (sh) as root inside the throwaway root."""
        return run(
            "nsenter", f"--target={self.holder.pid}", "--mount", "--", "chroot", str(self.path),
            "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive",
            "/bin/sh", "-c", script, check=check, timeout=timeout,
        )  # fmt: skip

    def copy_in(self, src: Path, dest: str) -> None:
        run("nsenter", f"--target={self.holder.pid}", "--mount", "--", "cp", str(src), f"{self.path}{dest}")

    def exists(self, path: str) -> bool:
        return self.sh(f"test -e {path} || test -L {path}", check=False).returncode == 0

    def close(self) -> None:
        self.holder.kill()
        self.holder.wait(timeout=30)


@pytest.fixture
def root() -> Iterator[Root]:
    base = Path(tempfile.mkdtemp(prefix="dyncc-root-"))
    made = Root(base)
    try:
        yield made
    finally:
        made.close()
        shutil.rmtree(base, ignore_errors=True)


def newer_build(deb: Path, out: Path) -> Path:
    """The same package with Version NEWER (the upgrade's 'newer build')."""
    tree = out / deb.stem
    run("dpkg-deb", "-R", str(deb), str(tree))
    control = tree / "DEBIAN" / "control"
    control.write_text(re.sub(r"(?m)^Version: .*$", f"Version: {NEWER}", control.read_text()))
    target = out / deb.name.replace(DEB_VERSION, NEWER)
    run("dpkg-deb", "-Zgzip", "-z1", "--root-owner-group", "-b", str(tree), str(target))
    shutil.rmtree(tree)
    return target


def test_install_run_upgrade_remove_purge(debs: Debs, root: Root, tmp_path: Path) -> None:
    for name, deb in (("edge", debs.edge), ("central", debs.central)):
        root.copy_in(deb, f"/tmp/dyncc-{name}.deb")
    root.sh("dpkg -i /tmp/dyncc-edge.deb /tmp/dyncc-central.deb")

    # installed: users, conffiles, units neither enabled nor started, own environments
    assert root.sh("getent passwd dyncc-edge dyncc-central | cut -d: -f1").stdout.split() == [
        "dyncc-edge", "dyncc-central",
    ]  # fmt: skip
    conffiles = root.sh("dpkg-query -W -f='${Conffiles}\\n' dyncc-edge dyncc-central").stdout
    for name in ("collect", "agent", "ingest", "control"):
        assert f"/etc/dyncc/{name}.toml " in conffiles, conffiles
        assert root.exists(f"/lib/systemd/system/dyncc-{name}.service")
        assert not root.exists(f"/etc/systemd/system/multi-user.target.wants/dyncc-{name}.service")
    site = "lib/python3.11/site-packages"
    assert not root.exists(f"/usr/lib/dyncc-edge/{site}/controller") and root.exists(
        f"/usr/lib/dyncc-edge/{site}/collector"
    )
    assert not root.exists(f"/usr/lib/dyncc-central/{site}/collector")
    system_site = root.sh("/usr/bin/python3.11 -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'").stdout
    assert root.sh(f"ls {system_site.strip()} | grep -ci dyncc || true").stdout.strip() == "0"

    for side in ("edge", "central"):
        assert root.sh(f"/usr/lib/dyncc-{side}/bin/dyncc --version").stdout.strip() == f"dyncc {VERSION}"
    assert root.sh("dyncc --version").stdout.strip() == f"dyncc {VERSION}"  # /usr/bin/dyncc, an alternative

    # collect --once from the installed files sees a connection of this test (same network namespace)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)), listener.accept()[0]:
            out = root.sh(
                f"/usr/lib/dyncc-edge/bin/dyncc collect --once --sink stdout --no-default-excludes --port {port}"
            ).stdout
    assert f'"src_port":{port}' in out and '"state_name":"established"' in out, out

    # schema apply on chDB from the installed files (sql/ inside the wheel)
    applied = root.sh("/usr/lib/dyncc-central/bin/dyncc schema apply --clickhouse chdb:///var/lib/dyncc/control/chdb")
    assert "applied" in applied.stdout + applied.stderr
    status = root.sh("/usr/lib/dyncc-central/bin/dyncc schema status --clickhouse chdb:///var/lib/dyncc/control/chdb")
    assert "001_" in status.stdout and "pending" not in status.stdout, status.stdout

    # upgrade to a newer build: the operator's edit and the agent's state are kept
    root.sh(
        "echo '# edited by the operator' >> /etc/dyncc/collect.toml"
        " && mkdir -p /var/lib/dyncc/agent && echo 7 > /var/lib/dyncc/agent/applied-version"
    )
    for name, deb in (("edge", debs.edge), ("central", debs.central)):
        root.copy_in(newer_build(deb, tmp_path), f"/tmp/dyncc-{name}-newer.deb")
    root.sh("dpkg -i /tmp/dyncc-edge-newer.deb /tmp/dyncc-central-newer.deb")
    assert root.sh("dpkg-query -W -f='${Version}' dyncc-edge").stdout == NEWER
    assert root.sh("tail -n1 /etc/dyncc/collect.toml").stdout.strip() == "# edited by the operator"
    assert root.sh("cat /var/lib/dyncc/agent/applied-version").stdout.strip() == "7"
    assert root.sh("/usr/lib/dyncc-edge/bin/dyncc --version").stdout.strip() == f"dyncc {VERSION}"

    # remove keeps the conffiles and the state; purge takes them
    root.sh("dpkg --remove dyncc-edge dyncc-central")
    assert root.exists("/etc/dyncc/collect.toml") and root.exists("/var/lib/dyncc/agent/applied-version")
    for gone in (
        "/usr/lib/dyncc-edge",
        "/usr/lib/dyncc-central",
        "/usr/bin/dyncc",
        "/lib/systemd/system/dyncc-agent.service",
    ):
        assert not root.exists(gone), gone
    root.sh("dpkg --purge dyncc-edge dyncc-central")
    for gone in ("/etc/dyncc", "/var/lib/dyncc", "/etc/alternatives/dyncc"):
        assert not root.exists(gone), (gone, root.sh(f"ls -laR {gone} 2>&1 | head -20", check=False).stdout)
    left = root.sh("dpkg-query -W -f='${Status}\\n' dyncc-edge dyncc-central", check=False)
    assert "ok installed" not in left.stdout and "config-files" not in left.stdout, left.stdout
