"""deploy/prometheus: the alerting rules pass `promtool check rules` and their unit tests
(`promtool test rules`), a broken rule fails both, every alert has a firing and a quiet unit
case and a section in docs/alerts.md, and a real Prometheus scraping a real `dyncc ingest` sees
DynccIngestLagGrowing fire while the loader's ClickHouse is stopped (about 30 s: marked slow).

Skipped only when Debian's `prometheus` package (prometheus, promtool) is not installed
(`bash deploy/prometheus/prometheus.sh install`).  The end-to-end test uses the shared test Kafka
(DYNCC_TEST_KAFKA) and a private ClickHouse of its own; every port it listens on is in
19500-19549: Prometheus 19500, the loader's metrics 19501, ClickHouse 19510-19512.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from prometheus_client import CollectorRegistry

from collector.agent.apply import ApplyOutcome
from collector.agent.core import Agent, AgentMetrics
from collector.agent.plan import Wanted
from collector.agent.state import AgentState
from collector.telemetry.metrics import CollectMetrics
from controller.control.loop import Metrics as ControlMetrics
from controller.ingest.metrics import AccessLogMetrics, IngestMetrics
from controller.rollout.publish import PublisherMetrics
from controller.store import StoreError
from schemas.congestion_pb2 import CongestionConfig, HostHealth, PrefixEntry
from schemas.signing import sign
from tests.conftest import unique_name
from tests.support.ingest_kafka import count_rows, create_topic, produce, total_rows
from tests.support.ingest_synth import synth_messages
from tests.support.private_server import PrivateServer
from tests.support.prometheus_util import (
    PROM_DIR,
    REPO,
    RULES,
    RULES_TEST,
    Prometheus,
    alert_names,
    binary,
    fast_rules,
    unit_cases,
)

PROM_PORT, LOADER_METRICS_PORT = 19500, 19501
CH_TCP, CH_HTTP, CH_INTERSERVER = 19510, 19511, 19512
DOCS = REPO / "docs" / "alerts.md"


@pytest.fixture(scope="module")
def promtool() -> str:
    path = binary("promtool")
    if path is None:
        pytest.skip(
            "promtool is not installed (Debian's prometheus package: bash deploy/prometheus/prometheus.sh install)"
        )
    return path


@pytest.fixture(scope="module")
def prometheus() -> str:
    path = binary("prometheus")
    if path is None:
        pytest.skip("prometheus is not installed (bash deploy/prometheus/prometheus.sh install)")
    return path


def run(cmd: list[str], cwd: Path = PROM_DIR) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60)


# ------------------------------------------------------------------ promtool


def test_rules_pass_promtool_check(promtool: str) -> None:
    out = run([promtool, "check", "rules", str(RULES)])
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(alert_names(RULES.read_text()))} rules found" in out.stdout


def test_rules_pass_their_unit_tests(promtool: str) -> None:
    out = run([promtool, "test", "rules", RULES_TEST.name])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_example_config_is_valid(promtool: str) -> None:
    out = run([promtool, "check", "config", "prometheus.yml"])
    assert out.returncode == 0, out.stdout + out.stderr


def test_install_leaves_the_packaged_service_off(promtool: str) -> None:
    """prometheus.sh install on a machine that has the package: nothing to do, and the package's
    own prometheus.service is neither enabled at boot nor running (apt_install_no_start)."""
    out = run(["bash", str(PROM_DIR / "prometheus.sh"), "install"], cwd=REPO)
    assert out.returncode == 0, out.stderr
    wants = sorted(Path("/etc/systemd/system").glob("*.wants/prometheus.service"))
    sysv = sorted(Path("/etc").glob("rc[S2-5].d/S[0-9][0-9]prometheus"))
    assert not wants and not sysv, (wants, sysv)
    # the packaged service runs /usr/bin/prometheus with the (empty) ARGS of /etc/default/prometheus
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        assert argv[:2] != [b"/usr/bin/prometheus", b""], f"the packaged prometheus runs: {cmdline.parent}"


def test_prometheus_sh_rules_runs_both_checks(promtool: str) -> None:
    out = run(["bash", str(PROM_DIR / "prometheus.sh"), "rules"], cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("SUCCESS") == 2, out.stdout


def _planted(tmp_path: Path, rules: str) -> Path:
    """The unit tests next to a rules file of `rules` in tmp_path."""
    (tmp_path / RULES.name).write_text(rules)
    shutil.copy(RULES_TEST, tmp_path / RULES_TEST.name)
    return tmp_path


def test_a_broken_rule_fails_the_check(promtool: str, tmp_path: Path) -> None:
    broken = RULES.read_text().replace(
        "expr: max by (job, instance) (dyncc_ingest_paused) == 1",
        "expr: max by (job, instance (dyncc_ingest_paused) == 1",
    )
    assert broken != RULES.read_text()
    d = _planted(tmp_path, broken)
    out = run([promtool, "check", "rules", RULES.name], cwd=d)
    assert out.returncode != 0 and "DynccIngestStorePaused" not in out.stdout, out.stdout
    assert "parse error" in (out.stdout + out.stderr)
    assert run([promtool, "test", "rules", RULES_TEST.name], cwd=d).returncode != 0


def test_a_rule_that_no_longer_fires_fails_the_unit_tests(promtool: str, tmp_path: Path) -> None:
    """Valid PromQL, wrong meaning (a lag threshold nobody reaches): only the unit tests see it."""
    changed = RULES.read_text().replace("(dyncc_ingest_consumer_lag) > 1000", "(dyncc_ingest_consumer_lag) > 1e9")
    assert changed != RULES.read_text()
    d = _planted(tmp_path, changed)
    assert run([promtool, "check", "rules", RULES.name], cwd=d).returncode == 0
    out = run([promtool, "test", "rules", RULES_TEST.name], cwd=d)
    assert out.returncode != 0
    assert "DynccIngestLagGrowing" in out.stdout + out.stderr


def test_every_alert_has_a_firing_and_a_quiet_case_and_its_labels() -> None:
    text = RULES.read_text()
    names = alert_names(text)
    assert len(names) == len(set(names)) >= 9, names
    cases = unit_cases(RULES_TEST.read_text())
    assert set(cases) == set(names), set(cases) ^ set(names)
    for name in names:
        assert True in cases[name] and False in cases[name], f"{name}: cases {cases[name]} (want firing and quiet)"
    # each rule: a for:, a severity, summary, description and runbook annotations
    for block in re.split(r"^\s*- alert:", text, flags=re.M)[1:]:
        name = block.split()[0]
        for want in (
            r"\n\s+for: \d+[smh]\n",
            r"\n\s+severity: (critical|warning)\n",
            r"\n\s+summary: ",
            r"\n\s+description: ",
        ):
            assert re.search(want, block), f"{name}: no {want!r}"
        assert f'runbook: "docs/alerts.md#{name.lower()}"' in block, name


def test_every_alert_has_its_docs_section() -> None:
    docs = DOCS.read_text()
    headings = re.findall(r"^### (\w+)\s*$", docs, re.M)
    assert sorted(headings) == sorted(alert_names(RULES.read_text()))


def test_fast_rules_keeps_the_expressions_and_shortens_waits() -> None:
    fast = fast_rules(RULES.read_text(), for_="2s", window="15s")
    assert "deriv(dyncc_ingest_consumer_lag[15s])" in fast and "for: 5m" not in fast
    assert re.findall(r"\n\s+for: (\S+)", fast) == ["2s"] * len(alert_names(fast))


# ------------------------------------------------------------------ the metrics the rules read


def _exposed_names(registry: CollectorRegistry) -> set[str]:
    """Every sample name `registry` can expose, labelled children or not (counters: NAME_total)."""
    names = set()
    for family in registry.collect():
        names.add(family.name)
        if family.type == "counter":
            names.add(f"{family.name}_total")
        if family.type == "histogram":
            names.update(f"{family.name}_{s}" for s in ("bucket", "sum", "count"))
    return names


def test_every_metric_the_rules_name_exists_in_a_component() -> None:
    registries = [
        IngestMetrics().registry,
        AccessLogMetrics().registry,
        CollectMetrics().registry,
        AgentMetrics().registry,
        ControlMetrics().registry,
    ]
    publisher = CollectorRegistry()
    PublisherMetrics(publisher)
    exposed = set().union(*(_exposed_names(r) for r in [*registries, publisher]))
    named = set(re.findall(r"\b(dyncc_[a-z_]+[a-z])\b", RULES.read_text()))
    assert named, "no metric found in the rules"
    assert named <= exposed, f"the rules name metrics no component exposes: {sorted(named - exposed)}"


def test_the_counters_the_alerts_watch_start_at_zero() -> None:
    """increase() misses the first increment of a series that appears at 1 (docs/alerts.md)."""
    control = ControlMetrics().registry
    for result in ("error", "publish_error"):
        assert control.get_sample_value("dyncc_control_rounds_total", {"result": result}) == 0
    for status in ("rejected", "publish_failed", "killed"):
        assert control.get_sample_value("dyncc_control_round_outcomes_total", {"status": status}) == 0
    agent = AgentMetrics().registry
    assert agent.get_sample_value("dyncc_agent_configs_total", {"result": "failed"}) == 0
    for reason in ("bad_signature", "unsigned", "wrong_pop", "invalid"):
        assert agent.get_sample_value("dyncc_agent_configs_refused_total", {"reason": reason}) == 0


class _Applier:
    """An enforcement mode in memory; `fail` makes the next applies fail."""

    def __init__(self) -> None:
        self.fail = False
        self.wanted: dict[str, Wanted] = {}

    def apply(self, wanted: Mapping[str, Wanted]) -> ApplyOutcome:
        if self.fail:
            return ApplyOutcome(ok=False, errors=["planted failure"])
        self.wanted = dict(wanted)
        return ApplyOutcome(ok=True, added=len(wanted), owned=len(wanted))

    def owned_count(self) -> int:
        return len(self.wanted)

    def in_force(self) -> dict[str, Wanted]:
        return dict(self.wanted)

    def describe_health(self, health: HostHealth) -> None:
        health.enforce = "route"

    def close(self) -> None:
        pass


def test_agent_gauges_show_a_stale_config_and_the_kill_switch(tmp_path: Path) -> None:
    """dyncc_agent_received_version above dyncc_agent_applied_version after a failed apply
    (DynccAgentStaleConfig); dyncc_agent_kill_switch 1 with a kill switch in force, also after
    a restart (DynccKillSwitchEngaged)."""
    key = Ed25519PrivateKey.generate()
    applier = _Applier()

    def agent() -> Agent:
        state = AgentState(tmp_path / "state", "fra1").load()
        return Agent(
            pop="fra1",
            host="edge1",
            netns=None,
            public_key=key.public_key(),
            state=state,
            applier=applier,
            open_connections=None,  # no TCP iterator: nothing is open here
        )

    def config(version: int, kill: bool = False) -> CongestionConfig:
        entries = [] if kill else [PrefixEntry(prefix="198.51.100.0/24", algorithm="cubic")]
        return sign(CongestionConfig(pop="fra1", version=version, entries=entries, kill_switch=kill), key)

    def gauges(a: Agent) -> tuple[float | None, ...]:
        r = a.metrics.registry
        return tuple(
            r.get_sample_value(n)
            for n in ("dyncc_agent_received_version", "dyncc_agent_applied_version", "dyncc_agent_kill_switch")
        )

    a = agent()
    assert gauges(a) == (0, 0, 0)
    a.handle(config(1))
    assert gauges(a) == (1, 1, 0)
    applier.fail = True
    a.handle(config(2))
    assert gauges(a) == (2, 1, 0)  # v2 received, v1 in force: stale
    assert a.metrics.registry.get_sample_value("dyncc_agent_configs_total", {"result": "failed"}) == 1
    applier.fail = False
    a.handle(config(3, kill=True))
    assert gauges(a) == (3, 3, 1)
    assert gauges(agent()) == (3, 3, 1)  # restarted with the kill switch in force
    a.handle(config(4))
    assert gauges(a) == (4, 4, 0)


# ------------------------------------------------------------------ end to end


class Loader:
    """`dyncc ingest` in a subprocess, its log in a file."""

    def __init__(self, log: Path, *args: str) -> None:
        self.log_path = log
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dyncc.cli", "ingest", "--metrics-port", str(LOADER_METRICS_PORT), *args],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metric(self, name: str) -> float:
        """The sum of the samples of `name` on /metrics (0 when none)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{LOADER_METRICS_PORT}/metrics", timeout=5) as r:
            lines = r.read().decode().splitlines()
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines if re.match(rf"{name}(\{{| )", line))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
        finally:
            self._log.close()


class Backlog:
    """Produces `messages` round and round (about `rate` a second) until stopped: the
    traffic that keeps arriving while the loader cannot load it."""

    def __init__(self, brokers: str, topic: str, messages: list[tuple[str, bytes]], rate: float) -> None:
        self.producer = Producer({"bootstrap.servers": brokers, "linger.ms": 20})
        self.topic, self.messages, self.rate = topic, messages, rate
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.is_set():
            key, value = self.messages[self.sent % len(self.messages)]
            self.producer.produce(self.topic, key=key.encode(), value=value)
            self.producer.poll(0)
            self.sent += 1
            ahead = self.sent / self.rate - (time.monotonic() - t0)
            if ahead > 0:
                self._stop.wait(ahead)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.producer.flush(10)


def _wait(cond: Callable[[], bool], timeout: float, what: str, *logs: Callable[[], str]) -> float:
    """Wait for `cond`; the seconds it took (AssertionError naming `what`, with the logs' tails)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return time.monotonic() - t0
        time.sleep(0.25)
    tails = "\n".join(f"--- log {i}:\n{log()[-3000:]}" for i, log in enumerate(logs))
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{tails}")


def _loaded(url: str) -> int:
    try:
        return count_rows(url)
    except StoreError:
        return -1


@pytest.fixture
def private_clickhouse() -> Iterator[PrivateServer]:
    """A ClickHouse 18.16 of this test's own: the one the test stops."""
    server = PrivateServer(
        "clickhouse",
        DYNCC_CH_TCP_PORT=str(CH_TCP),
        DYNCC_CH_HTTP_PORT=str(CH_HTTP),
        DYNCC_CH_INTERSERVER_PORT=str(CH_INTERSERVER),
    )
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.fixture
def topic(kafka_brokers: str) -> Iterator[str]:
    name = unique_name("alerts")
    create_topic(kafka_brokers, name, partitions=2)
    yield name
    admin = AdminClient({"bootstrap.servers": kafka_brokers})
    for f in admin.delete_topics([name]).values():
        try:
            f.result(timeout=10)
        except Exception as exc:  # best effort: a leftover topic harms no other test
            print(f"topic {name} not deleted: {exc}")


def _firing(prom: Prometheus, name: str) -> list[dict[str, Any]]:
    return [a for a in prom.alerts() if a["labels"].get("alertname") == name and a["state"] == "firing"]


@pytest.mark.kafka
@pytest.mark.clickhouse
@pytest.mark.slow
def test_lag_alert_fires_in_a_real_prometheus_while_the_loaders_clickhouse_is_down(
    promtool: str, prometheus: str, kafka_brokers: str, topic: str, private_clickhouse: PrivateServer, tmp_path: Path
) -> None:
    """Prometheus scrapes `dyncc ingest` every second and evaluates the real rules each second
    (their `for:` 2s and range windows 15s: fast_rules); the loader is caught up and the alert
    inactive; ClickHouse stops while messages keep arriving; the loader pauses, its lag grows
    past 1000, and /api/v1/alerts shows DynccIngestLagGrowing (and DynccIngestStorePaused) firing."""
    t_start = time.monotonic()
    url = f"clickhouse://default:@127.0.0.1:{CH_TCP}/dalerts?connect_timeout=1&timeout=20"
    first = list(synth_messages(800, hosts=4, rows_per_poll=200, seed=41))
    pool = list(synth_messages(2000, hosts=8, rows_per_poll=4, seed=42, run_id=2, max_bytes=8000))

    (tmp_path / "dyncc-alerts.yml").write_text(fast_rules(RULES.read_text(), for_="2s", window="15s"))
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "rule_files: [dyncc-alerts.yml]\n"
        "scrape_configs:\n  - job_name: dyncc-ingest\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{LOADER_METRICS_PORT}']}}]\n"
    )
    check = run([promtool, "check", "config", str(tmp_path / "prometheus.yml")])
    assert check.returncode == 0, check.stdout + check.stderr

    loader = Loader(
        tmp_path / "ingest.log",
        "--kafka", kafka_brokers, "--topic", topic, "--group", f"g-{topic}", "--clickhouse", url,
        "--max-wait", "300ms", "--backoff-max", "1s",
    )  # fmt: skip
    prom: Prometheus | None = None
    backlog: Backlog | None = None
    timings: dict[str, float] = {}
    try:
        prom = Prometheus(tmp_path / "prometheus.yml", tmp_path / "tsdb", PROM_PORT, tmp_path / "prometheus.log")
        prom.wait_ready()
        produce(kafka_brokers, topic, first)
        timings["first part loaded"] = _wait(
            lambda: _loaded(url) == total_rows(first), 60, "first part loaded", lambda: loader.log
        )
        timings["scraped lag 0"] = _wait(
            lambda: prom is not None and bool(prom.query('dyncc_ingest_consumer_lag{job="dyncc-ingest"} == 0')),
            30,
            "Prometheus scraping lag 0",
            lambda: loader.log,
        )
        rules = {r["name"]: r for r in prom.rules()}
        assert rules["DynccIngestLagGrowing"]["health"] == "ok", rules["DynccIngestLagGrowing"]
        assert rules["DynccIngestLagGrowing"]["state"] == "inactive"
        assert not prom.alerts(), prom.alerts()

        private_clickhouse.stop()
        t_down = time.monotonic()
        backlog = Backlog(kafka_brokers, topic, pool, rate=500)
        timings["paused"] = _wait(lambda: loader.metric("dyncc_ingest_paused") == 1, 30, "loader paused")
        timings["lag alert firing"] = _wait(
            lambda: bool(_firing(prom, "DynccIngestLagGrowing")), 60, "DynccIngestLagGrowing firing", lambda: loader.log
        )
        (alert,) = _firing(prom, "DynccIngestLagGrowing")
        assert alert["labels"] == {
            "alertname": "DynccIngestLagGrowing",
            "severity": "critical",
            "component": "ingest",
            "job": "dyncc-ingest",
            "instance": f"127.0.0.1:{LOADER_METRICS_PORT}",
            "topic": topic,
        }
        assert float(alert["value"]) > 1000
        assert "falling further behind" in alert["annotations"]["description"]
        assert alert["annotations"]["runbook"] == "docs/alerts.md#dynccingestlaggrowing"
        _wait(lambda: bool(_firing(prom, "DynccIngestStorePaused")), 20, "DynccIngestStorePaused firing")
        timings["outage until both alerts fired"] = time.monotonic() - t_down
        assert loader.proc.poll() is None, loader.log[-3000:]
    finally:
        if backlog is not None:
            backlog.stop()
        if prom is not None:
            prom.stop()
        rc = loader.stop()
    timings["total"] = time.monotonic() - t_start
    sent = backlog.sent if backlog is not None else 0
    print("\n" + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()) + f"; {sent} messages during the outage")
    assert rc == 0, loader.log[-3000:]
