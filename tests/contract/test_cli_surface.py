"""The command line is the recorded one: testdata/cli_surface.json, re-recorded on purpose.

Every `dyncc` subcommand's options (names, dest, action, metavar, choices, effective default,
help, ...) as the real parsers build them (tests/contract/record_cli.py) must equal the
recording. A change to the command line updates the recording in the same commit:
`.venv/bin/python -m tests.contract.record_cli`.
"""

from __future__ import annotations

import argparse
import json
from types import ModuleType
from typing import Any

import pytest

from dyncc.cli import SUBCOMMANDS
from dyncc_common.settings import REGISTRY
from dyncc_common.settings_doc import load
from tests.contract import record_cli
from tests.contract.record_cli import RECORDING, RERECORD, differences, dumps, surface


def _recorded() -> record_cli.Surface:
    loaded: record_cli.Surface = json.loads(RECORDING.read_text(encoding="utf-8"))
    return loaded


def test_the_command_line_is_the_recorded_one() -> None:
    found = differences(_recorded(), surface())
    assert not found, (
        f"the command line differs from {RECORDING.name} ({len(found)} differences):\n  "
        + "\n  ".join(found)
        + f"\nif the change is on purpose, re-record it: {RERECORD}"
    )


def test_the_recording_is_as_the_recorder_writes_it() -> None:
    """No hand edits in another layout: a re-recording changes only what changed."""
    assert RECORDING.read_text(encoding="utf-8") == dumps(_recorded())


def test_every_subcommand_is_recorded() -> None:
    assert set(SUBCOMMANDS) <= set(_recorded())
    assert {"control keygen", "control explain", "control rollout", "control pin"} <= set(_recorded())


def test_a_changed_option_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison can fail: an option's help, metavar and choices changed, one added, one
    removed, and a table's default changed are each one readable line."""
    real_build = record_cli.build_parser

    def build(name: str, module: ModuleType) -> argparse.ArgumentParser:
        parser = real_build(name, module)
        if name == "collect":
            action = next(a for a in parser._actions if a.dest == "export_addresses")
            monkeypatch.setattr(action, "choices", ("full", "prefix", "none"))
            monkeypatch.setattr(action, "metavar", "HOW")
            parser.add_argument("--brand-new", help="a new flag")
        if name == "agent":
            action = next(a for a in parser._actions if a.dest == "once")
            monkeypatch.setattr(action, "help", "apply once")
            parser._remove_action(next(a for a in parser._actions if a.dest == "from_file"))
        return parser

    monkeypatch.setattr(record_cli, "build_parser", build)
    row: Any = load(REGISTRY["ingest"])._table().by_key["inserters"]
    monkeypatch.setattr(row, "default", row.default + 1)

    found = differences(_recorded(), surface())

    was = _recorded()
    assert found == [
        "dyncc agent --from-file: the option is gone",
        f"dyncc agent --once: help {was['agent']['--once']['help']!r} -> 'apply once'",
        "dyncc collect --brand-new: a new option",
        f"dyncc collect --export-addresses: metavar {was['collect']['--export-addresses']['metavar']!r} -> 'HOW'",
        "dyncc collect --export-addresses: choices ['full', 'prefix'] -> ['full', 'prefix', 'none']",
        f"dyncc ingest --inserters: default {row.default - 1!r} -> {row.default!r}",
    ]


def test_a_lost_or_new_command_is_reported() -> None:
    recorded = _recorded()
    live = json.loads(json.dumps(recorded))
    live["collect2"] = live.pop("collect")
    assert differences(recorded, live) == [
        "dyncc collect: the command is gone",
        f"dyncc collect2: a new command ({len(recorded['collect'])} options)",
    ]
