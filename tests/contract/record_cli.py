"""The recorded command-line surface of `dyncc`: every (sub)command's options, from the real parsers.

`surface()` builds each subcommand's parser as `dyncc` builds it (dyncc.cli.build_parser) and
describes every option: option strings, dest, kind of action, nargs, const, metavar, choices,
required, group, help and the EFFECTIVE default (a settings table's flag has the parser default
argparse.SUPPRESS: its default is the table row's). tests/contract/test_cli_surface.py compares
the live surface with testdata/cli_surface.json. A change to the command line is made on
purpose by re-recording it and committing the new file with the change:

    .venv/bin/python -m tests.contract.record_cli
"""

from __future__ import annotations

import argparse
import importlib
import json
import pathlib
import socket
from pathlib import Path
from typing import Any

from dyncc.cli import SUBCOMMANDS, build_parser
from dyncc_common.settings import REGISTRY, Settings
from dyncc_common.settings_doc import load

RECORDING = Path(__file__).parent / "testdata" / "cli_surface.json"
RERECORD = ".venv/bin/python -m tests.contract.record_cli"
#: the fields of an option, in the order a difference is reported
FIELDS = (
    *("option_strings", "dest", "action", "nargs", "const", "metavar"),
    *("choices", "required", "default", "group", "help"),
)

Option = dict[str, Any]
Surface = dict[str, dict[str, Option]]


def plain(value: Any) -> Any:
    """A JSON value for a default, choice or const; the host's own name is recorded as <hostname>."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return "<hostname>" if value == socket.gethostname() else value
    if isinstance(value, pathlib.PurePath):
        return {"path": str(value)}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, type):
        return {"type": value.__name__}
    return {"repr": repr(value)}


def _table_defaults(command: str) -> dict[str, Any]:
    """dest -> the effective default of the settings tables behind `command` (a sub-command's over its parent's)."""
    out: dict[str, Any] = {}
    for name in (command.split()[0], command):
        if name in REGISTRY:
            cls: type[Settings] = load(REGISTRY[name])
            for row in cls._table().rows:
                s = row.setting
                out[s.key] = {"text": s.default_text} if s.default_text is not None else plain(row.default)
    return out


def _groups(parser: argparse.ArgumentParser) -> dict[int, str]:
    out: dict[int, str] = {}
    for group in parser._action_groups:
        for action in group._group_actions:
            out[id(action)] = group.title or ""
    return out


def _help(action: argparse.Action, parser: argparse.ArgumentParser) -> str | None:
    """The help as --help prints it (%(default)s and the like expanded), one line."""
    if action.help is None or action.help == argparse.SUPPRESS:
        return action.help
    formatter = parser._get_formatter()
    return " ".join(formatter._expand_help(action).split())


def describe(parser: argparse.ArgumentParser, command: str, out: Surface) -> None:
    """Add `command`'s options (and those of its sub-commands, as 'command sub') to `out`."""
    defaults = _table_defaults(command)
    groups = _groups(parser)
    options: dict[str, Option] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                describe(sub, f"{command} {name}", out)
            options[action.dest] = {"action": "subcommands", "choices": sorted(action.choices)}
            continue
        suppressed = action.default == argparse.SUPPRESS and action.dest in defaults
        default = defaults[action.dest] if suppressed else plain(action.default)
        option: Option = {
            "option_strings": list(action.option_strings),
            "dest": action.dest,
            "action": type(action).__name__.lstrip("_"),
            "nargs": action.nargs,
            "const": plain(action.const),
            "metavar": plain(action.metavar),
            "choices": plain(action.choices) if action.choices is not None else None,
            "required": action.required,
            "default": default,
            "group": groups.get(id(action), ""),
            "help": _help(action, parser),
        }
        key = max(action.option_strings, key=len) if action.option_strings else action.dest
        options[key] = option
    out[command] = options


def surface() -> Surface:
    """Every `dyncc` subcommand's options, as the live parsers have them."""
    out: Surface = {}
    for name, (module_name, _) in SUBCOMMANDS.items():
        describe(build_parser(name, importlib.import_module(module_name)), name, out)
    return dict(sorted(out.items()))


def dumps(recorded: Surface) -> str:
    return json.dumps(recorded, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def differences(recorded: Surface, live: Surface) -> list[str]:
    """One readable line per difference between a recorded and a live surface (empty: the same)."""
    lines: list[str] = []
    for command in sorted(set(recorded) | set(live)):
        if command not in live:
            lines.append(f"dyncc {command}: the command is gone")
            continue
        if command not in recorded:
            lines.append(f"dyncc {command}: a new command ({len(live[command])} options)")
            continue
        old_options, new_options = recorded[command], live[command]
        for key in sorted(set(old_options) | set(new_options)):
            if key not in new_options:
                lines.append(f"dyncc {command} {key}: the option is gone")
            elif key not in old_options:
                lines.append(f"dyncc {command} {key}: a new option")
            else:
                old, new = old_options[key], new_options[key]
                for field in (*FIELDS, *sorted((set(old) | set(new)) - set(FIELDS))):
                    if old.get(field) != new.get(field):
                        lines.append(f"dyncc {command} {key}: {field} {old.get(field)!r} -> {new.get(field)!r}")
    return lines


def main() -> None:
    RECORDING.write_text(dumps(surface()), encoding="utf-8")
    print(f"recorded {RECORDING.relative_to(Path.cwd()) if RECORDING.is_relative_to(Path.cwd()) else RECORDING}")


if __name__ == "__main__":
    main()
