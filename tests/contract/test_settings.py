"""The settings tables against what they must not drift from.

- docs/settings.md is exactly the text `python -m dyncc_common.settings_doc` generates;
- every key of deploy/config/<component>.toml is a TOML key (or alias) of that component's
  table, and the file builds that component's settings (for every registered component
  that has such a file);

The command line itself is compared with its recording in test_cli_surface.py.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from dyncc_common.settings import REGISTRY
from dyncc_common.settings_doc import load, render

ROOT = Path(__file__).resolve().parents[2]


def test_settings_doc_is_generated_from_the_tables() -> None:
    want = render()
    have = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert have == want, "docs/settings.md is stale: python -m dyncc_common.settings_doc > docs/settings.md"


DEPLOYED = sorted(name for name in REGISTRY if (ROOT / "deploy" / "config" / f"{name}.toml").exists())


def test_every_deployed_component_is_checked() -> None:
    assert {"collect", "agent", "ingest"} <= set(DEPLOYED)


@pytest.mark.parametrize("name", DEPLOYED)
def test_example_config_uses_only_the_tables_keys_and_loads(name: str) -> None:
    cls = load(REGISTRY[name])
    path = ROOT / "deploy" / "config" / f"{name}.toml"
    doc = tomllib.loads(path.read_text())
    table = doc.get(cls.COMPONENT, doc)
    assert table, f"{path} sets nothing"
    known = cls._table().by_toml
    assert [key for key in table if key.replace("-", "_") not in known] == []
    settings = cls.from_sources({}, str(path))
    for key, value in table.items():  # each value arrived: the loaded field is the parsed value
        row, inverted = known[key.replace("-", "_")]
        got: Any = settings
        for attr in row.path:
            got = getattr(got, attr)
        assert got == row.setting.value(value, key, inverted), key


def test_an_unknown_key_in_a_deployed_file_fails_the_check(tmp_path: Path) -> None:
    """The check above can fail: a key that no row reads is refused when the file is loaded."""
    from dyncc_common.errors import ConfigError

    path = tmp_path / "collect.toml"
    path.write_text((ROOT / "deploy" / "config" / "collect.toml").read_text() + "intervall = '5s'\n")
    with pytest.raises(ConfigError, match="unknown key 'intervall'"):
        load(REGISTRY["collect"]).from_sources({}, str(path))
