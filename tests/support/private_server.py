"""A private Kafka broker or ClickHouse server for outage tests, run by the deploy scripts (own ports and data dir)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


class PrivateServer:
    """`deploy/<name>/<name>.sh` with its own stack dir and port variables; stop() and start() are real."""

    def __init__(self, name: str, **ports: str) -> None:
        self.script = DEPLOY / name / f"{name}.sh"
        self.stack = Path(tempfile.mkdtemp(prefix=f"dyncc-private-{name}-"))
        self.env = dict(os.environ, DYNCC_STACK_DIR=str(self.stack), **ports)

    def _run(self, *cmds: str) -> None:
        for cmd in cmds:
            out = subprocess.run(
                ["bash", str(self.script), cmd], env=self.env, capture_output=True, text=True, timeout=120
            )
            assert out.returncode == 0, f"{self.script.name} {cmd}: {out.stderr[-2000:]}"

    def start(self) -> None:
        self._run("start", "wait")

    def stop(self) -> None:
        self._run("stop")

    def remove(self) -> None:
        """Stop (best effort) and delete the data dir."""
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            self.stop()
        shutil.rmtree(self.stack, ignore_errors=True)
