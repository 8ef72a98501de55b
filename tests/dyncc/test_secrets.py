"""The secrets grep: a ClickHouse password (password_file) and a Kafka SASL password (file and
environment variable) never appear in --help, logs, errors, metrics or a written report.

Runs every dyncc command's --help, then real commands against a private ClickHouse with TLS and
a password (ports 19624-19627) and a Kafka client with SASL credentials and no broker."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from dyncc.cli import SUBCOMMANDS, build_parser, main
from tests.conftest import unique_name
from tests.support.clickhouse_tls import TlsClickHouse
from tests.support.netns_util import REPO

TCP_PORT = 19624  # http 19625, interserver 19626, TLS 19627
METRICS_PORT = 19628
NO_BROKER = "127.0.0.1:19629"  # nothing listens there
KAFKA_SECRET = "dsec-kafka-Secret-7741"


@pytest.fixture(scope="module")
def tls_ch() -> Iterator[TlsClickHouse]:
    server = TlsClickHouse(TCP_PORT)
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.fixture
def secret_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The Kafka password in a file and in DSEC_KAFKA_PASSWORD; the file's path."""
    path = tmp_path / "kafka-password"
    path.write_text(KAFKA_SECRET + "\n")
    monkeypatch.setenv("DSEC_KAFKA_PASSWORD", KAFKA_SECRET)
    return path


def assert_no_secret(text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text, f"secret found in:\n{text[-3000:]}"


def help_argvs() -> list[list[str]]:
    """--help of dyncc, of every subcommand and of every subcommand's actions."""
    argvs = [["--help"]]
    for name, (module_name, _) in SUBCOMMANDS.items():
        argvs.append([name, "--help"])
        parser = build_parser(name, importlib.import_module(module_name))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                argvs += [[name, sub, "--help"] for sub in action.choices]
    return argvs


def test_help_of_every_command(secret_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seen = 0
    for argv in help_argvs():
        try:
            status = main(argv)
        except SystemExit as exc:
            status = int(exc.code or 0)
        out, err = capsys.readouterr()
        assert status == 0 and "usage:" in out.lower() + err.lower(), (argv, err)
        assert_no_secret(out + err, KAFKA_SECRET, str(secret_env.read_text()).strip())
        seen += 1
    assert seen > len(SUBCOMMANDS)


def dyncc(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dyncc.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
    )


def test_commands_with_a_clickhouse_password_file(tls_ch: TlsClickHouse, tmp_path: Path) -> None:
    url = tls_ch.url(unique_name("dsec"))
    outputs = []
    try:
        schema = dyncc("schema", "apply", "--clickhouse", url)
        assert schema.returncode == 0, schema.stderr
        outputs.append(schema.stdout + schema.stderr)
        empty = tmp_path / "empty.bin"
        empty.write_bytes(b"")
        ingest = dyncc("ingest", "--from-file", str(empty), "--clickhouse", url, "--metrics-port", "0", "-v")
        assert ingest.returncode == 0, ingest.stderr
        outputs.append(ingest.stdout + ingest.stderr)
        report = tmp_path / "report.html"
        made = dyncc("report", "--clickhouse", url, "--output", str(report))
        assert made.returncode == 0, made.stderr
        outputs += [made.stdout + made.stderr, report.read_text()]
        outputs.append(control_with_metrics(url))
        bad = dyncc("schema", "status", "--clickhouse", url.replace("secure=1", "secure=0").replace("&ca_certs", "&x"))
        assert bad.returncode == 2
        outputs.append(bad.stdout + bad.stderr)
    finally:
        dyncc("schema", "status", "--clickhouse", url)  # the server still answers
        from controller.store import open_store

        store = open_store(url)
        store.drop_database()  # type: ignore[attr-defined]
        store.close()
    assert_no_secret("\n".join(outputs), tls_ch.password)


def control_with_metrics(url: str) -> str:
    """`dyncc control --dry-run -v` with metrics on METRICS_PORT: its /metrics, then its logs after SIGTERM."""
    args = ["--clickhouse", url, "--dry-run", "-v", "--every", "1s", "--delay", "0s"]
    args += ["--metrics-port", str(METRICS_PORT)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "dyncc.cli", "control", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
    )
    metrics = ""
    try:
        deadline = time.monotonic() + 60
        while not metrics:
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "control did not serve metrics"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=2) as resp:
                    metrics = resp.read().decode()
            except OSError:
                time.sleep(0.3)
        time.sleep(1.5)  # a round or two
        with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=2) as resp:
            metrics += resp.read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        logs = proc.communicate(timeout=30)[0]
    assert "dyncc_" in metrics
    return metrics + logs


@pytest.mark.parametrize("source", ["--kafka-password-file", "--kafka-password-env"])
def test_commands_with_a_kafka_password(secret_env: Path, tmp_path: Path, source: str) -> None:
    given = str(secret_env) if source == "--kafka-password-file" else "DSEC_KAFKA_PASSWORD"
    sasl = ["--kafka-sasl", "SCRAM-SHA-512", "--kafka-user", "dsec", source, given]
    runs = [
        dyncc(
            "ingest", "--kafka", NO_BROKER, "--clickhouse", f"chdb://{tmp_path}/chdb", "--connect-timeout", "1s",
            "--metrics-port", "0", "-v", *sasl,
        ),
        dyncc("collect", "--once", "--brokers", NO_BROKER, "--flush-timeout", "1s", "-v", *sasl),
    ]  # fmt: skip
    for run in runs:
        assert run.returncode != 0 or run.stderr, run
        assert_no_secret(run.stdout + run.stderr, KAFKA_SECRET)
