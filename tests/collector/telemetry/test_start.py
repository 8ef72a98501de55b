"""Start-up of `dyncc collect`: what runs before numpy loads stays numpy-free and agrees with the real modules."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from collector.netlink.sockdiag import DEFAULT_CHUNK, RECV_SIZE
from collector.netlink.sockdiag_dump import chunk_buffer_size
from collector.telemetry import prefetch as collect_prefetch
from collector.telemetry import settings as collect_config
from collector.telemetry import start as collect_start
from collector.telemetry.start import start_prefetch
from schemas import tcpinfo_columns

REPO = Path(__file__).resolve().parents[3]


def test_cli_module_and_raw_settings_need_no_numpy() -> None:
    code = (
        "import sys, argparse\n"
        "import dyncc.cli\n"
        "from collector.telemetry import cli as collect_cli\n"
        "from collector.telemetry.settings import CollectSettings\n"
        "p = argparse.ArgumentParser(); collect_cli.SETTINGS.add_arguments(p); collect_cli.configure(p)\n"
        "argv = ['--once', '--all-netns', '--state', 'established,close-wait', '--port', '443']\n"
        "s = CollectSettings.from_sources(vars(p.parse_args(argv)))\n"
        "from collector.telemetry.settings import parse_states\n"
        "assert parse_states(s.state) == [1, 8], s\n"
        "heavy = ('numpy', 'google', 'confluent_kafka', 'logging', 'tomllib')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_light_constants_match_the_codec_and_parser() -> None:
    assert collect_config.DEFAULT_MAX_ROWS == tcpinfo_columns.DEFAULT_MAX_ROWS
    assert collect_config.DEFAULT_MAX_BYTES == tcpinfo_columns.DEFAULT_MAX_BYTES
    # a prefetch slot holds a whole chunk buffer (chunk + one datagram + the parser's padding)
    for chunk in (RECV_SIZE, 1 << 20, collect_prefetch.DEFAULT_CHUNK_BYTES, DEFAULT_CHUNK):
        assert chunk + collect_prefetch.SLOT_SLACK >= chunk_buffer_size(chunk)


def test_no_prefetch_for_settings_that_will_be_refused() -> None:
    base = {"state": ["established"], "netns": [], "all_netns": False}
    assert start_prefetch({**base, "state": ["nonsense"]}) is None
    assert start_prefetch({**base, "netns": ["a"], "all_netns": True}) is None
    assert start_prefetch({**base, "netns": ["h3col-no-such-namespace"]}) is None  # nothing to open


@pytest.mark.parametrize(
    "argv",
    [
        ["--once"],
        ["--once", "--netns", "h3a", "--netns", "h3b", "--state", "established,close-wait"],
        ["--sink", "file", "--out", "/tmp/x", "--once", "--state", "listen", "--state", "established"],
        ["--once", "--all-netns", "--no-default-excludes", "--pop", "ams"],
        ["--once", "--netns=h3c", "--state=syn-sent"],
    ],
)
def test_early_dump_plan_is_the_full_options_plan(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's early fork reads the dump options exactly as the full parser does."""
    started: list[tuple[list[str], int]] = []
    monkeypatch.setattr(collect_start.Prefetch, "start", lambda ns, states: started.append((ns, states)))
    monkeypatch.setattr(collect_start, "namespaces_to_dump", lambda netns, all_netns: [*netns, "*" * all_netns])
    collect_start.start_early_prefetch(argv)
    full = argparse.ArgumentParser()
    collect_config.CollectSettings.add_arguments(full)
    settings = collect_config.CollectSettings.from_sources(vars(full.parse_args(argv)))
    assert started == [collect_start.dump_plan(settings.dump_plan_settings())]


def test_no_early_dump_without_once_or_with_a_config_file(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[object] = []
    monkeypatch.setattr(collect_start.Prefetch, "start", lambda *a: started.append(a))
    for argv in (["--netns", "x"], ["--once", "--config", "c.toml"], ["--once", "--config=c.toml"], ["--once", "-h"]):
        collect_start.start_early_prefetch(argv)
    assert started == []


_REFUSED = """
import os, sys
from collector.telemetry import start as collect_start
from dyncc.cli import main
started = []
real_start = collect_start.Prefetch.start
collect_start.Prefetch.start = lambda *a, **k: started.append(real_start(*a, **k)) or started[-1]
try:
    main(["collect", "--once", "--sink", "nowhere"])  # argparse refuses the sink
except SystemExit as exc:
    print("exit", exc.code)
helper = started[0]
try:
    os.kill(helper.child, 0)
    alive = True
except ProcessLookupError:
    alive = False
print(helper.closed, alive, collect_start._early is None)
"""


def test_refused_options_leave_no_dump_helper_behind() -> None:
    """A real dump helper forked early (own namespace) is stopped and reaped when the options are refused."""
    out = subprocess.run([sys.executable, "-c", _REFUSED], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["exit", "2", "True", "False", "True"]
