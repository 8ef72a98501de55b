"""`--config FILE.toml` for the subcommands, and the example configs in deploy/config."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

import pytest

from collector.agent import cli as agent_cli
from collector.telemetry.settings import add_arguments, load_config
from controller.cli import main as cli_main
from controller.cli_config import apply_config_file, config_values
from controller.control import cli as control_cli
from controller.ingest import cli as ingest_cli
from dyncc_common.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name, module", [("agent", agent_cli), ("ingest", ingest_cli), ("control", control_cli)])
def test_example_configs_use_only_real_options(name: str, module: object) -> None:
    parser = argparse.ArgumentParser()
    module.configure(parser)  # type: ignore[attr-defined]
    path = ROOT / "deploy" / "config" / f"{name}.toml"
    values = config_values(tomllib.loads(path.read_text()), name, parser, str(path))
    assert values, f"{path} sets nothing"
    assert set(values) <= {a.dest for a in parser._actions}


def test_collect_example_config_loads() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    settings = load_config(parser.parse_args(["--config", str(ROOT / "deploy" / "config" / "collect.toml")]))
    assert settings.topic == "tcpinfo" and settings.interval == 10.0 and settings.poller.pop == "lax"


def _agent_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    agent_cli.configure(parser)
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
