"""The controller's side of the agents' --max-config-age (issue 33 item 3): an unchanged stable config
is published again, newly signed (a new version, the same entries, a fresh created_at_ns), once it is
--republish-after old, so an agent never refuses the config in force as too old; before that an
unchanged round publishes nothing.  Real stores (ClickHouse 18.16 and chDB), a publish directory."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from controller.rollout.publish import Publisher
from controller.store import Store
from dyncc_common.errors import ConfigError
from schemas.congestion_pb2 import CongestionConfig
from schemas.signing import load_public_key, verify
from tests.support.rollout_util import desired, make_keys, publish_round, rollout_settings

HOUR_NS = 3600 * 10**9
PREFIXES = ["192.0.2.0/24", "2001:db8:0:100::/56"]


def test_an_unchanged_config_is_republished_once_it_is_republish_after_old(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    private, public = make_keys(tmp_path)
    out = tmp_path / "cfg"
    now = [1_800_000_000 * 10**9]
    settings = rollout_settings(["--publish-dir", str(out), "--key", str(private), "--republish-after", "12h"])
    publisher = Publisher(store, settings, clock=lambda: now[0])

    def round_at(hours: float) -> CongestionConfig:
        now[0] = 1_800_000_000 * 10**9 + int(hours * HOUR_NS)
        publish_round(publisher, [desired("lax", PREFIXES)])
        config = CongestionConfig.FromString((out / "lax.cfg").read_bytes())
        verify(config, load_public_key(public))
        return config

    first = round_at(0)
    assert first.version == 1 and first.created_at_ns == now[0]
    assert round_at(11.9).version == 1  # unchanged and young: nothing published
    caplog.set_level(logging.INFO, "dyncc.rollout")
    again = round_at(12)
    assert again.version == 2 and again.created_at_ns == now[0] and not again.kill_switch
    assert [(e.prefix, e.algorithm) for e in again.entries] == [(e.prefix, e.algorithm) for e in first.entries]
    assert (
        "v2 = stable v1 re-signed with key" in caplog.text and "signed 12.0h ago, --republish-after 12h" in caplog.text
    )
    assert round_at(23.9).version == 2  # the age counts from the new signing
    assert round_at(24.5).version == 3


def test_republish_after_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--republish-after 0s must be above 0"):
        rollout_settings(["--publish-dir", str(tmp_path), "--republish-after", "0"])
    assert rollout_settings([]).republish_after == 86400  # the default: 1 day, below the agents' 7 days
