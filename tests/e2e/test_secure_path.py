"""The secure path end to end (issue 26): every hop over TLS, every Kafka client with SCRAM-SHA-512.

    collect (edge namespace) -> Kafka SASL_SSL -> ingest --drain -> ClickHouse TLS + password_file
    -> control --once (signed config) -> Kafka SASL_SSL -> agent (--netns) -> route congctl bbr
    -> ApplyStatus -> Kafka SASL_SSL -> control rollout advance (the controller's status reader)

Real TCP flows between two namespaces (`dsp-edge-*` serves, `dsp-cli-*` connects; documentation
addresses only) are dumped by `dyncc collect --once`; ClickHouse must then hold exactly the rows the
collector reported it exported.  A few seconds of flows cannot make a "consistently poor" prefix, so
synthetic telemetry (tests/support/scoring_synth.py) for hours in 2024 is inserted into the same TLS
ClickHouse and the round is scored `--at` that time.  Negative case: the real agent with a wrong
Kafka password exits 2 at start with one line on stderr.

The private servers (deploy/kafka/kafka.sh, deploy/clickhouse/clickhouse.sh) use this module's own
ports: Kafka 19640-19643, ClickHouse 19650-19653; each is one module-scoped fixture, stopped and
removed on failure too, and so are the namespaces and every process started here.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from controller.store import open_store
from controller.store.migrate import apply_migrations
from tests.conftest import unique_name
from tests.support import scoring_synth as synth
from tests.support.clickhouse_tls import TlsClickHouse
from tests.support.ingest_kafka import count_rows
from tests.support.kafka_tls import TlsKafka
from tests.support.netns_util import namespaces, new_ns_name, ns_sh, require_root, start_ready, veth_pair
from tests.support.private_server import PrivateServer

pytestmark = [pytest.mark.netns, pytest.mark.kafka]

REPO = Path(__file__).resolve().parents[2]
KAFKA_BASE = 19640  # plaintext 19640, controller 19641, SASL_SSL 19642, mTLS 19643
CH_TCP_PORT = 19650  # http 19651, interserver 19652, TLS 19653

POP = "dspop"
HOST = "edge-1"
EDGE_V4, CLIENT_V4 = "192.0.2.1", "192.0.2.2"
EDGE_V6, CLIENT_V6 = "2001:db8:1::1", "2001:db8:1::2"
FLOWS_PER_FAMILY = 12
BAD = "203.0.113.0/24"  # the consistently poor prefix of the synthetic telemetry
NORMAL = ["198.51.100.0/24", *(f"2001:db8:0:{i}00::/56" for i in range(1, 9))]
SYNTH_START = int(dt.datetime(2024, 3, 1, 9, 0, tzinfo=dt.UTC).timestamp())
AT = "2024-03-01T12:00:30Z"  # 36 buckets of synthetic telemetry before it


# ------------------------------------------------------------------ fixtures


def _script(server: PrivateServer, command: str) -> None:
    """`deploy/<name>/<name>.sh COMMAND` of a private server ("start" returns once it is launched)."""
    server._run(command)


@dataclass(frozen=True)
class Servers:
    kafka: TlsKafka
    clickhouse: TlsClickHouse


@pytest.fixture(scope="module")
def _launched() -> Iterator[Servers]:
    """Both private servers launched at once (`start`: the JVM and ClickHouse come up side by side);
    `broker` and `clickhouse` each wait for theirs.  Both are stopped and removed at the end, also
    when a start fails."""
    if shutil.which("java") is None or shutil.which("openssl") is None:
        pytest.fail("java and openssl are needed for the private TLS broker")
    servers = Servers(TlsKafka(KAFKA_BASE), TlsClickHouse(CH_TCP_PORT))
    pair: list[PrivateServer] = [servers.kafka.server, servers.clickhouse.server]
    try:
        with ThreadPoolExecutor(2) as pool:
            for launch in [pool.submit(_script, s, "start") for s in pair]:
                launch.result()
        yield servers
    finally:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(PrivateServer.remove, pair))


@pytest.fixture(scope="module")
def broker(_launched: Servers) -> TlsKafka:
    _script(_launched.kafka.server, "wait")
    return _launched.kafka


@pytest.fixture(scope="module")
def clickhouse(_launched: Servers) -> TlsClickHouse:
    _script(_launched.clickhouse.server, "wait")
    return _launched.clickhouse


@dataclass(frozen=True)
class Edge:
    edge: str  # the edge host: serves the flows, runs the agent's routes
    client: str


@pytest.fixture(scope="module")
def edge() -> Iterator[Edge]:
    """Two namespaces on a veth; FLOWS_PER_FAMILY idle-after-transfer connections per family into the edge."""
    require_root()
    names = Edge(new_ns_name("dsp-edge"), new_ns_name("dsp-cli"))
    with namespaces([names.edge, names.client]):
        veth_pair(names.edge, "eth0", names.client, "eth0")
        for ns, v4, v6 in ((names.edge, EDGE_V4, EDGE_V6), (names.client, CLIENT_V4, CLIENT_V6)):
            ns_sh(ns, "ip", "addr", "add", f"{v4}/24", "dev", "eth0")
            ns_sh(ns, "ip", "-6", "addr", "add", f"{v6}/64", "dev", "eth0", "nodad")
        # the edge's covering routes (not the agent's): its per-prefix routes go the same way
        ns_sh(names.edge, "ip", "route", "add", "default", "via", CLIENT_V4, "congctl", "cubic")
        ns_sh(names.edge, "ip", "-6", "route", "add", "default", "via", CLIENT_V6, "congctl", "cubic")
        procs = [start_ready(names.edge, "tests.support.collector_conns", "serve", "443")]
        try:
            procs.append(
                start_ready(
                    names.client,
                    "tests.support.collector_conns",
                    "connect",
                    f"{EDGE_V4},443,{FLOWS_PER_FAMILY}",
                    f"{EDGE_V6},443,{FLOWS_PER_FAMILY}",
                )
            )
            time.sleep(0.3)  # the last ACKs settle
            yield names
        finally:
            for proc in procs:
                _stop(proc, stdin=True)


# ------------------------------------------------------------------ helpers


def _stop(proc: subprocess.Popen[str], *, stdin: bool = False, timeout: float = 15) -> None:
    """Close stdin (the flow helpers) or send SIGTERM; SIGKILL after `timeout`."""
    if proc.poll() is not None:
        return
    if stdin and proc.stdin is not None:
        proc.stdin.close()
    else:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def _dyncc(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dyncc.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
    )


def _spawn(running: list[subprocess.Popen[str]], *args: str) -> subprocess.Popen[str]:
    """`dyncc ARGS` started in the background (added to `running`, which the test stops at the end)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dyncc.cli", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
    )
    running.append(proc)
    return proc


def _finish(proc: subprocess.Popen[str], what: str, outputs: list[str], timeout: float = 60) -> str:
    """Wait for a `_spawn`ed command, which must exit 0; its stdout + stderr (also added to `outputs`)."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"{what}: exit {proc.returncode}\n{out[-2000:]}\n{err[-3000:]}"
    outputs.append(out + err)
    return out + err


def _ok(proc: subprocess.CompletedProcess[str], what: str) -> str:
    assert proc.returncode == 0, f"{what}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


def _agent(
    broker: TlsKafka, edge: Edge, topics: tuple[str, str], public: Path, state: Path, password: Path
) -> list[str]:
    cfg_topic, status_topic = topics
    return [
        sys.executable, "-m", "dyncc.cli", "agent", "--kafka", broker.sasl_ssl, "--pop", POP, "--host", HOST,
        "--netns", edge.edge, "--public-key", str(public), "--config-topic", cfg_topic,
        "--status-topic", status_topic, "--state-dir", str(state),
        *broker.flags(password),
    ]  # fmt: skip


def _owned_routes(ns: str) -> dict[str, str]:
    """prefix -> congctl algorithm of the agent's routes (proto 250) in the namespace."""
    found: dict[str, str] = {}
    for family in ("-4", "-6"):
        for route in json.loads(ns_sh(ns, "ip", "-j", family, "route", "show", "proto", "250") or "[]"):
            metrics = {k: v for m in route.get("metrics", []) for k, v in m.items()}
            found[route["dst"]] = str(metrics.get("congestion", ""))
    return found


def _wait_for(check: Callable[[], bool], what: str, detail: Callable[[], str], timeout: float = 30.0) -> None:
    """Poll `check` until it holds; else fail with `what` and `detail()` (the logs that say why)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{detail()}")


# ------------------------------------------------------------------ the path


def test_collect_ingest_control_agent_all_over_tls_and_scram(
    broker: TlsKafka, clickhouse: TlsClickHouse, edge: Edge, tmp_path: Path
) -> None:
    password = broker.password_file(tmp_path / "kafka-pw")
    tls = broker.flags(password)
    telemetry, cfg_topic, status_topic = unique_name("dsp_tcp"), unique_name("dsp_cfg"), unique_name("dsp_st")
    url = clickhouse.url(unique_name("dsp"))
    keys = tmp_path / "keys"
    private, public = keys / "dyncc-config.key", keys / "dyncc-config.pub"
    outputs: list[str] = []
    running: list[subprocess.Popen[str]] = []
    log_path = tmp_path / "agent.log"
    try:
        # 1. the edge's real flows -> Kafka over TLS + SCRAM (the signing key is made meanwhile)
        collect = _spawn(
            running, "collect", "--once", "--sink", "kafka", "--brokers", broker.sasl_ssl, "--topic", telemetry,
            "--netns", edge.edge, "--port", "443", "--pop", POP, "--host", HOST, "--flush-timeout", "15s", *tls,
        )  # fmt: skip
        keygen = _spawn(running, "control", "keygen", "--out-dir", str(keys))
        # ... and meanwhile, hours of a consistently poor prefix (2024) go into the same TLS store:
        # a few seconds of real flows cannot make one
        store = open_store(url)
        try:
            apply_migrations(store)
            patterns = {p: synth.NORMAL for p in NORMAL} | {BAD: synth.STEADY_BAD}
            inserted = synth.insert_samples(store, synth.samples_frame(POP, patterns, SYNTH_START, 48))
        finally:
            store.close()
        collect_err = _finish(collect, "collect", outputs)
        found = re.search(r"exported=(\d+)", collect_err)
        assert found, collect_err[-3000:]
        exported = int(found.group(1))
        # the server end of each connection (the listener is not established)
        assert exported == 2 * FLOWS_PER_FAMILY, collect_err[-3000:]
        _finish(keygen, "keygen", outputs)
        assert private.is_file() and public.is_file(), sorted(p.name for p in keys.iterdir())

        # 2. Kafka -> ingest -> ClickHouse over TLS with a password file: every row once
        ingest = _spawn(
            running, "ingest", "--kafka", broker.sasl_ssl, "--topic", telemetry, "--clickhouse", url, "--drain",
            "--metrics-port", "0", *tls,
        )  # fmt: skip
        _finish(ingest, "ingest", outputs)
        real = f"pop = '{POP}' AND host = '{HOST}' AND prefix IN ('192.0.2.0/24', '2001:db8:1::/56')"
        assert count_rows(url, f"SELECT count() FROM tcpinfo WHERE {real}") == exported
        assert count_rows(url) == exported + inserted  # nothing else, nothing twice

        # 3. a round scores the store as of AT and publishes the signed config over TLS + SCRAM;
        # 4. the real agent in the edge namespace (started meanwhile) reads it over TLS + SCRAM
        with open(log_path, "wb") as log:
            agent = subprocess.Popen(
                _agent(broker, edge, (cfg_topic, status_topic), public, tmp_path / "agent-state", password),
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        running.append(agent)
        publish = [
            "--kafka", broker.sasl_ssl, "--config-topic", cfg_topic, "--status-topic", status_topic,
            "--key", str(private), *tls,
        ]  # fmt: skip
        round_proc = _spawn(
            running, "control", "--clickhouse", url, "--once", "--at", AT, "--pop", POP, "--holdout", "0",
            "--trial-blocks", "0", "--staging", "off", *publish,
        )  # fmt: skip
        _finish(round_proc, "control --once", outputs)

        def logs() -> str:
            return f"control:\n{outputs[-1][-2500:]}\nagent:\n{log_path.read_text()[-2500:]}"

        _wait_for(lambda: BAD in _owned_routes(edge.edge), f"the agent to install {BAD}", logs)
        assert _owned_routes(edge.edge) == {BAD: "bbr"}
        shown = ns_sh(edge.edge, "ip", "route", "show", BAD)
        assert "congctl bbr" in shown and f"via {CLIENT_V4}" in shown, shown

        # ... and its status reaches the controller side over TLS + SCRAM
        # (the table shows the host's latest report: APPLIED, or UNCHANGED after a later reconcile)
        status_line = re.compile(rf"^\s+{HOST}\s+v(\d+)\s+(?:APPLIED|UNCHANGED) v(\d+)", re.M)
        advance = ["control", "--clickhouse", url, "--staging", "off", "rollout", "advance", "--pop", POP, *publish]
        seen: list[int] = []

        def applied() -> bool:
            out = _finish(_spawn(running, *advance), "rollout advance", outputs)
            match = status_line.search(out)
            if match and int(match.group(1)) >= 1 and match.group(1) == match.group(2):
                seen.append(int(match.group(1)))
            return bool(seen)

        _wait_for(applied, f"{HOST}'s applied status in `control rollout advance`", logs)
        # the report of the apply itself, as the controller stored it from the status topic
        applied_rows = count_rows(
            url,
            f"SELECT count() FROM apply_status WHERE pop = '{POP}' AND host = '{HOST}' AND result = 'APPLIED' "
            f"AND applied_version = {seen[0]} AND routes_added >= 1",
        )
        assert applied_rows >= 1, outputs[-1][-2500:]
        _stop(agent)
        assert agent.returncode == 0, log_path.read_text()[-3000:]
    finally:
        for proc in running:
            _stop(proc)
    outputs.append(log_path.read_text())
    for text in outputs:
        assert broker.password not in text and clickhouse.password not in text


def test_agent_with_a_wrong_kafka_password_is_one_line_exit_2(broker: TlsKafka, edge: Edge, tmp_path: Path) -> None:
    bad = broker.password_file(tmp_path / "bad-pw", "not-the-password")
    keys = tmp_path / "keys"
    _ok(_dyncc("control", "keygen", "--out-dir", str(keys)), "keygen")
    public = keys / "dyncc-config.pub"
    before = _owned_routes(edge.edge)
    argv = _agent(broker, edge, (unique_name("dsp_cfg"), unique_name("dsp_st")), public, tmp_path / "st", bad)
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr[-3000:]
    # one line: no start line before the refused probe, no librdkafka lines repeating it
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("dyncc agent: Kafka "), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "SASL authentication failed" in lines[0] and broker.sasl_ssl in lines[0], lines[0]
    assert "not-the-password" not in proc.stderr + proc.stdout
    assert time.monotonic() - started < 20
    assert _owned_routes(edge.edge) == before  # refused before it touched a route
