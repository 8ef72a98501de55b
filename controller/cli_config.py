"""`--config FILE.toml` for every `dyncc` subcommand that has no config handling of its own.

The file holds the same keys as the command's long options ('-' or '_'), either
at the top level or in a table named after the subcommand ([agent], [ingest],
[control], ...).  Values become the parser's defaults, so flags on the command
line still win.  An unknown key, a value of the wrong type (a string for an
integer option, a list for a single-valued one, ...) or an unreadable file is a
ConfigError (one line, exit 2).  Pure except for reading the file.
"""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dyncc_common.errors import ConfigError


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


def _flag(action: argparse.Action) -> bool:
    return isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction | argparse._StoreConstAction)


def _checked(key: str, value: Any, action: argparse.Action, source: str) -> Any:
    """The value for the parser's defaults; ConfigError when its TOML type cannot fit the option."""

    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{source}: key {key!r} must be {expected}, not {value!r}")

    if _flag(action):
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    many = isinstance(action, argparse._AppendAction) or action.nargs in ("*", "+")
    items = value if isinstance(value, list) else [value]
    if isinstance(value, list) and not many:
        raise bad("a single value")
    out = []
    for item in items:
        if isinstance(item, dict | list | bool):
            raise bad("a number" if action.type in (int, float) else "a string")
        if action.type in (int, float):
            expected = "an integer" if action.type is int else "a number"
            if isinstance(item, float) and action.type is int:
                raise bad(expected)
            try:
                item = action.type(item)
            except (TypeError, ValueError):
                raise bad(expected) from None
        else:
            item = str(item)  # durations and sizes may be written as bare numbers
            if callable(action.type):
                item = action.type(item)  # Path and the like
        if action.choices is not None and item not in action.choices:
            raise bad(f"one of {', '.join(map(str, action.choices))}")
        out.append(item)
    return out if many else out[0]


def config_values(data: dict[str, Any], command: str, parser: argparse.ArgumentParser, source: str) -> dict[str, Any]:
    """dest -> value from a parsed TOML document; unknown keys and ill-typed values are a ConfigError."""
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
        values[action.dest] = _checked(key, value, action, source)
    return values


def apply_config_file(parser: argparse.ArgumentParser, argv: Sequence[str], command: str) -> None:
    """If argv names --config FILE, load it and install its values as the parser's defaults."""
    pre = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    pre.add_argument("--config")
    try:
        known, _ = pre.parse_known_args(list(argv))
    except argparse.ArgumentError as exc:
        raise ConfigError(str(exc)) from exc
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
