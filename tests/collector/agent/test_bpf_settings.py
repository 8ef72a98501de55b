"""`--enforce` reaches the agent's and the lab's settings; the bpf-only options need the bpf mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.agent.settings import AgentSettings
from dyncc.lab.cli import options_from_settings
from dyncc.lab.settings import LabSettings
from dyncc_common.errors import ConfigError

BASE = {"pop": "lax", "public_key": "/nonexistent.pem", "kafka": "127.0.0.1:19092"}


def test_agent_enforce_defaults_to_route_and_takes_bpf_from_flags_or_toml(tmp_path: Path) -> None:
    assert AgentSettings.from_sources(BASE).enforce == "route"
    flags = AgentSettings.from_sources({**BASE, "enforce": "bpf", "bpf_pin_dir": "/sys/fs/bpf/dyncc-x"})
    assert (flags.enforce, flags.bpf_pin_dir) == ("bpf", Path("/sys/fs/bpf/dyncc-x"))
    toml = tmp_path / "agent.toml"
    toml.write_text('[agent]\nenforce = "bpf"\nbpf_cgroup = "/sys/fs/cgroup/unified/web"\n')
    loaded = AgentSettings.from_sources(BASE, str(toml))
    assert (loaded.enforce, loaded.bpf_cgroup) == ("bpf", Path("/sys/fs/cgroup/unified/web"))


def test_agent_refuses_unknown_modes_and_bpf_options_without_bpf() -> None:
    with pytest.raises(ConfigError, match="route, bpf"):
        AgentSettings.from_sources({**BASE, "enforce": "tc"})
    with pytest.raises(ConfigError, match="go with --enforce bpf"):
        AgentSettings.from_sources({**BASE, "bpf_object": "/tmp/x.o"})


def test_lab_enforce_reaches_the_lab_options() -> None:
    assert options_from_settings(LabSettings.from_sources({})).enforce == "route"
    assert options_from_settings(LabSettings.from_sources({"enforce": "bpf"})).enforce == "bpf"
    with pytest.raises(ConfigError):
        LabSettings.from_sources({"enforce": "routes"})
