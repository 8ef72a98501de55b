"""Paths a non-root user may not reach (issue 33 item 7): `dyncc report --output` and `dyncc demo
--workdir` / `--output` under a directory only root may search end in one line and exit 2,
before any work, not in a PermissionError traceback (Path.is_dir() raises EACCES there)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CLICKHOUSE_URL

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to the nobody user")


@pytest.fixture
def private() -> Iterator[Path]:
    """A directory in /tmp that only root may enter (like /root)."""
    path = Path(tempfile.mkdtemp(prefix="dyncc-private-"))
    os.chmod(path, 0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m", "dyncc.cli", *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": "/tmp"}, cwd="/tmp"
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["report", "--output", "{p}/r.html", "--clickhouse", CLICKHOUSE_URL],
            "dyncc report: cannot write --output {p}/r.html: Permission denied",
        ),
        (["demo", "--replay", "--workdir", "{p}/dd"], "dyncc demo: cannot use --workdir {p}/dd: Permission denied"),
        (
            ["demo", "--replay", "--output", "{p}/d.html"],
            "dyncc demo: cannot write --output {p}/d.html: Permission denied",
        ),
    ],
)
def test_an_unreachable_path_is_one_line_and_exit_2(private: Path, args: list[str], line: str) -> None:
    proc = _as_nobody(*(a.format(p=private) for a in args))
    assert (proc.returncode, proc.stderr.strip()) == (2, line.format(p=private)), proc.stderr[-2000:]
    assert not any(private.iterdir())  # nothing was created
