"""`--config FILE.toml` for every `dyncc` subcommand that has no config handling of its own.

The file holds the same keys as the command's long options ('-' or '_'), either
at the top level or in a table named after the subcommand ([agent], [ingest],
[control], ...).  Values become the parser's defaults, so flags on the command
line still win.  An unknown key or an unreadable file is a ConfigError (one
line, exit 2).  Pure except for reading the file.
"""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from collector.daemon import ConfigError


def add_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="TOML file with the same keys as the long options; command-line flags override it",
    )


def _option_map(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Long option name (with '_' for '-') and dest -> action, for the parser's own options."""
    found: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction) or action.dest == "config":
            continue
        found[action.dest] = action
        for option in action.option_strings:
            if option.startswith("--"):
                found[option[2:].replace("-", "_")] = action
    return found


def config_values(data: dict[str, Any], command: str, parser: argparse.ArgumentParser, source: str) -> dict[str, Any]:
    """dest -> value from a parsed TOML document; unknown keys are a ConfigError."""
    table = data.get(command) if isinstance(data.get(command), dict) else data
    assert isinstance(table, dict)
    options = _option_map(parser)
    values: dict[str, Any] = {}
    for key, value in table.items():
        action = options.get(key.replace("-", "_"))
        if action is None:
            raise ConfigError(f"{source}: unknown key {key!r} for 'dyncc {command}'")
        if isinstance(value, dict):
            raise ConfigError(f"{source}: key {key!r} must be a value, not a table")
        if isinstance(action, argparse._AppendAction) and not isinstance(value, list):
            value = [value]
        values[action.dest] = value
    return values


def apply_config_file(parser: argparse.ArgumentParser, argv: Sequence[str], command: str) -> None:
    """If argv names --config FILE, load it and install its values as the parser's defaults."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(list(argv))
    if not known.config:
        return
    path = Path(known.config)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {path} is not valid TOML: {exc}") from exc
    values = config_values(data, command, parser, str(path))
    for action in parser._actions:
        if action.dest in values:
            action.required = False  # given by the file; a flag may still override it
    parser.set_defaults(**values)
