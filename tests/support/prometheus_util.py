"""Prometheus in tests: the binaries of Debian's package, a test copy of the alerting rules with
short `for:` and range windows, and a real Prometheus (deploy/prometheus/prometheus.sh run) with
its HTTP API."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PROM_DIR = REPO / "deploy" / "prometheus"
PROMETHEUS_SH = PROM_DIR / "prometheus.sh"
RULES = PROM_DIR / "dyncc-alerts.yml"
RULES_TEST = PROM_DIR / "dyncc-alerts.test.yml"


def binary(name: str) -> str | None:
    """`prometheus` or `promtool` on PATH or in Debian's /usr/bin; None when not installed."""
    found = shutil.which(name)
    if found:
        return found
    debian = Path("/usr/bin") / name
    return str(debian) if debian.is_file() else None


def alert_names(rules_text: str) -> list[str]:
    """The `- alert: NAME` entries of a rules file, in order."""
    return re.findall(r"^\s*- alert:\s*(\S+)\s*$", rules_text, re.M)


def unit_cases(test_text: str) -> dict[str, list[bool]]:
    """Per alert name, one bool per alert_rule_test entry of a promtool test file: whether it
    expects the alert firing (a non-empty exp_alerts).  Read line by line: the file's own layout
    (`alertname:` then `exp_alerts: []` or `exp_alerts:` and a list)."""
    cases: dict[str, list[bool]] = {}
    name = None
    for line in test_text.splitlines():
        m = re.match(r"\s*alertname:\s*(\S+)\s*$", line)
        if m:
            name = m.group(1)
            continue
        m = re.match(r"\s*exp_alerts:\s*(\[\])?\s*(#.*)?$", line)
        if m and name is not None:
            cases.setdefault(name, []).append(m.group(1) is None)
            name = None
    return cases


def fast_rules(rules_text: str, for_: str = "1s", window: str = "20s") -> str:
    """The rules with every `for:` set to `for_` and every range `[...]` to `window`: what a
    Prometheus evaluating each second needs to fire them in a test, the expressions otherwise
    the real ones."""
    text = re.sub(r"^(\s*for:\s*)\S+", rf"\g<1>{for_}", rules_text, flags=re.M)
    return re.sub(r"\[\d+[smhd]\]", f"[{window}]", text)


class Prometheus:
    """A real Prometheus on 127.0.0.1:`port` (prometheus.sh run) with `config` and its TSDB in
    `data_dir`; stop() always ends it (SIGTERM, then SIGKILL)."""

    def __init__(self, config: Path, data_dir: Path, port: int, log: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            ["bash", str(PROMETHEUS_SH), "run", str(config), str(data_dir), str(port)],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def api(self, path: str) -> Any:
        """GET /api/v1/<path>: its `data` (AssertionError when the status is not success)."""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}", timeout=5) as r:
            body = json.load(r)
        assert body.get("status") == "success", body
        return body["data"]

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited ({self.proc.returncode}):\n{self.log[-3000:]}")
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r,
            ):
                if r.status == 200:
                    return
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready on {self.url} after {timeout}s:\n{self.log[-3000:]}")

    def alerts(self) -> list[dict[str, Any]]:
        """/api/v1/alerts: the pending and firing alerts."""
        return list(self.api("alerts")["alerts"])

    def rules(self) -> list[dict[str, Any]]:
        """Every rule of every group (/api/v1/rules), with its health and state."""
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector."""
        return list(self.api("query?" + urllib.parse.urlencode({"query": expr}))["result"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
