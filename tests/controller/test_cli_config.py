"""`--config FILE.toml` for the subcommands not yet wired to a settings table (controller/cli_config.py).

The wired ones (SETTINGS in the command's module) read --config through their table:
tests/contract/test_settings.py checks their example configs, tests/dyncc_common the loading."""

from __future__ import annotations

import argparse
import importlib
import tomllib
from pathlib import Path

import pytest

from collector.telemetry.settings import CollectSettings
from controller.cli import SUBCOMMANDS
from controller.cli import main as cli_main
from controller.cli_config import apply_config_file, config_values
from dyncc_common.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


UNWIRED = sorted(
    name
    for name, (module, _) in SUBCOMMANDS.items()
    if (ROOT / "deploy" / "config" / f"{name}.toml").exists()
    and not hasattr(importlib.import_module(module), "SETTINGS")
)


@pytest.mark.parametrize("name", UNWIRED)
def test_example_configs_use_only_real_options(name: str) -> None:
    parser = argparse.ArgumentParser()
    importlib.import_module(SUBCOMMANDS[name][0]).configure(parser)
    path = ROOT / "deploy" / "config" / f"{name}.toml"
    values = config_values(tomllib.loads(path.read_text()), name, parser, str(path))
    assert values, f"{path} sets nothing"
    assert set(values) <= {a.dest for a in parser._actions}


def test_collect_example_config_loads() -> None:
    settings = CollectSettings.from_sources({}, str(ROOT / "deploy" / "config" / "collect.toml"))
    assert settings.topic == "tcpinfo" and settings.interval == 10.0 and settings.pop == "lax"


def _agent_parser() -> argparse.ArgumentParser:
    """A parser like `dyncc agent`'s before its table: required options, typed values."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--pop", required=True)
    parser.add_argument("--public-key", required=True, type=Path)
    parser.add_argument("--reconcile-every", default="60s")
    parser.add_argument("--config")
    return parser


def test_file_values_are_defaults_and_flags_win(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.toml"
    cfg.write_text('[agent]\npop = "lax"\npublic-key = "/k.pub"\nreconcile_every = "5s"\n')
    parser = _agent_parser()
    argv = ["--config", str(cfg), "--reconcile-every", "9s"]
    apply_config_file(parser, argv, "agent")
    args = parser.parse_args(argv)  # --pop and --public-key are required: the file gives them
    assert (args.pop, str(args.public_key), args.reconcile_every) == ("lax", "/k.pub", "9s")


def test_unknown_key_is_a_config_error(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.toml"
    cfg.write_text('pop = "lax"\npopp = "typo"\n')
    with pytest.raises(ConfigError, match="unknown key 'popp'"):
        apply_config_file(_agent_parser(), ["--config", str(cfg)], "agent")


@pytest.mark.parametrize("text, fragment", [("pop = ", "not valid TOML"), (None, "cannot read config")])
def test_bad_file_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | None, fragment: str
) -> None:
    cfg = tmp_path / "ingest.toml"
    if text is not None:
        cfg.write_text(text)
    assert cli_main(["ingest", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and len(err.splitlines()) == 1
