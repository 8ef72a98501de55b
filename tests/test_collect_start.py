"""Start-up of `dyncc collect`: what runs before numpy loads stays numpy-free and agrees with the real modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from collector import batch_codec, collect_config, collect_prefetch
from collector.collect_netlink import DEFAULT_CHUNK, RECV_SIZE
from collector.collect_start import start_prefetch
from collector.netlink_diag import chunk_buffer_size

REPO = Path(__file__).resolve().parent.parent


def test_cli_module_and_raw_settings_need_no_numpy() -> None:
    code = (
        "import sys, argparse\n"
        "import controller.cli\n"
        "from collector import collect_cli\n"
        "from collector.collect_config import load_raw\n"
        "p = argparse.ArgumentParser(); collect_cli.configure(p)\n"
        "raw = load_raw(p.parse_args(['--once', '--netns', 'x', '--state', 'established,close-wait']))\n"
        "from collector.collect_config import parse_states\n"
        "assert parse_states(raw['state']) == [1, 8], raw\n"
        "heavy = ('numpy', 'google', 'confluent_kafka', 'logging')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_light_constants_match_the_codec_and_parser() -> None:
    assert collect_config.DEFAULT_MAX_ROWS == batch_codec.DEFAULT_MAX_ROWS
    assert collect_config.DEFAULT_MAX_BYTES == batch_codec.DEFAULT_MAX_BYTES
    # a prefetch slot holds a whole chunk buffer (chunk + one datagram + the parser's padding)
    for chunk in (RECV_SIZE, 1 << 20, collect_prefetch.DEFAULT_CHUNK_BYTES, DEFAULT_CHUNK):
        assert chunk + collect_prefetch.SLOT_SLACK >= chunk_buffer_size(chunk)


def test_no_prefetch_for_settings_that_will_be_refused() -> None:
    base = {"state": ["established"], "netns": [], "all_netns": False}
    assert start_prefetch({**base, "state": ["nonsense"]}) is None
    assert start_prefetch({**base, "netns": ["a"], "all_netns": True}) is None
    assert start_prefetch({**base, "netns": ["h3col-no-such-namespace"]}) is None  # nothing to open
