"""The settings tables against what they must not drift from.

- docs/settings.md is exactly the text `python -m dyncc_common.settings_doc` generates;
- every key of deploy/config/<component>.toml is a TOML key (or alias) of that component's
  table, and the file builds that component's settings (for every registered component
  that has such a file);
- the command line is unchanged: every `dyncc` (sub)command's parser, built as `dyncc` builds
  it, has the options captured before the settings model (testdata/cli_options.json) with
  the same option strings, dest, nargs, choices, kind of action and EFFECTIVE default.
  Allowed differences, by design of dyncc_common.settings: a table's flag has the default
  argparse.SUPPRESS (its effective default is the table's), store_true is
  store_const(True), `required` is checked when the settings are built (so a TOML file may
  give it), the value's type is the row's kind instead of argparse's `type`, and the help
  wording.  Commands not wired to a table yet are compared the same way, defaults as raw
  values.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pathlib
import socket
import tomllib
from pathlib import Path
from typing import Any

import pytest

from dyncc.cli import SUBCOMMANDS, build_parser
from dyncc_common.settings import REGISTRY, Settings
from dyncc_common.settings_doc import load, render

ROOT = Path(__file__).resolve().parents[2]
BEFORE = json.loads((Path(__file__).parent / "testdata" / "cli_options.json").read_text())
SWITCHES = ("_StoreTrueAction", "_StoreFalseAction", "_StoreConstAction")


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


# ---- the command line ---------------------------------------------------------------------


def _json(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return "<hostname>" if value == socket.gethostname() else value
    if isinstance(value, pathlib.PurePath):
        return {"path": str(value)}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    return {"repr": repr(value)}


def describe(parser: argparse.ArgumentParser, prefix: str, out: dict[str, list[dict[str, Any]]]) -> None:
    """Each (sub)command's actions, as testdata/cli_options.json holds them (the compared fields)."""
    actions = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                describe(sub, f"{prefix} {name}", out)
            continue
        actions.append(
            {
                "option_strings": list(action.option_strings),
                "dest": action.dest,
                "action": type(action).__name__,
                "default": action.default,
                "nargs": action.nargs,
                "const": action.const,
                "choices": list(action.choices) if action.choices is not None else None,
                "required": action.required,
            }
        )
    out[prefix] = actions


def current_cli() -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for name, (module_name, _) in SUBCOMMANDS.items():
        describe(build_parser(name, importlib.import_module(module_name)), name, out)
    return out


def _kind(action: dict[str, Any]) -> str:
    if action["action"] in SWITCHES:
        const = action["const"] if action["action"] == "_StoreConstAction" else action["action"] == "_StoreTrueAction"
        return f"switch({const})"
    return {"_AppendAction": "append"}.get(action["action"], action["action"])


def _rows(command: str) -> dict[str, Any]:
    """dest -> row of the tables behind `command` (a sub-command's own table over its parent's)."""
    rows: dict[str, Any] = {}
    for name in (command.split()[0], command):
        if name in REGISTRY:
            cls: type[Settings] = load(REGISTRY[name])
            rows.update({row.setting.key: row for row in cls._table().rows})
    return rows


def differences(before: dict[str, Any], after: dict[str, list[dict[str, Any]]]) -> list[str]:
    """What changed in the command line, apart from the allowed differences (module docstring)."""
    problems: list[str] = []
    effective = before["effective_defaults"]
    for command, spec in before["commands"].items():
        new_actions = after.get(command)
        if new_actions is None:
            problems.append(f"{command}: the command is gone")
            continue
        rows = _rows(command)
        old_actions = [a for a in spec["actions"] if a["action"] not in ("_HelpAction", "_SubParsersAction")]
        seen: set[int] = set()
        for old in old_actions:
            label = f"{command} {'/'.join(old['option_strings']) or old['dest']}"
            if old["option_strings"]:
                matches = [a for a in new_actions if set(old["option_strings"]) & set(a["option_strings"])]
            else:
                matches = [a for a in new_actions if not a["option_strings"] and a["dest"] == old["dest"]]
            if len(matches) != 1:
                problems.append(f"{label}: {len(matches)} matching options")
                continue
            new = matches[0]
            seen.add(id(new))
            if new["option_strings"] != old["option_strings"]:
                problems.append(f"{label}: option strings {new['option_strings']}")
            for key in ("dest", "nargs", "choices"):
                if _json(new[key]) != old[key]:
                    problems.append(f"{label}: {key} {old[key]!r} -> {_json(new[key])!r}")
            if _kind(new) != _kind(old):
                problems.append(f"{label}: action {_kind(old)} -> {_kind(new)}")
            row = rows.get(old["dest"])
            if old["required"] and not new["required"] and not (row is not None and row.setting.required):
                problems.append(f"{label}: no longer required")
            problem = _default_problem(old, new, row, effective.get(command.split()[0], {}))
            if problem:
                problems.append(f"{label}: {problem}")
        for new in new_actions:
            if id(new) not in seen and new["action"] != "_HelpAction":
                problems.append(f"{command} {'/'.join(new['option_strings']) or new['dest']}: a new option")
    return problems


def _default_problem(old: dict[str, Any], new: dict[str, Any], row: Any, effective: dict[str, Any]) -> str | None:
    """Why the effective defaults differ, or None."""
    want = old["default"]
    if (want is None or want == []) and old["dest"] in effective:
        want = effective[old["dest"]]  # the default the old parser did not hold (a table elsewhere)
    if want == argparse.SUPPRESS:
        return None  # a sub-parser's copy of a parent's option: compared with the parent
    if new["default"] != argparse.SUPPRESS:  # not from a table: the parser's own default, as it was
        return None if _json(new["default"]) == want else f"default {want!r} -> {_json(new['default'])!r}"
    if row is None:
        return "default SUPPRESS without a table row"
    s = row.setting
    if want == "<hostname>":  # computed at start: the table says so
        return None if row.default is None and s.default_text else f"default <hostname> -> {row.default!r}"
    if isinstance(want, dict) and "path" in want:
        want = want["path"]
    if want == "" and s.kind != "str":
        want = None  # "" meant "not given" (lab --duration)
    if want == "" and s.kind != "str":
        want = None  # "" meant "not given" (lab --duration): the row's default is None
    if want is None:
        return None if row.default in (None, (), "", False) else f"default None -> {row.default!r}"
    expected = s.finish(s.parse(want, "the old default"))
    return None if expected == row.default else f"default {want!r} -> {row.default!r}"


#: options added since the snapshot was taken, each on purpose (the snapshot is the CLI before
#: the settings tables, kept to prove that move changed nothing)
ADDED_SINCE = (
    {
        "schema --cluster: a new option",
        # the fleet lab: POPs x edge hosts and path classes instead of one edge with slow / fine links
        "demo --duration: default '3m' -> 360.0",
        # evidence: app-limited samples left out by default; the effect model and per-prefix trials
        "control --include-app-limited: a new option",
        "control --effect-level: a new option",
        "control --purity: a new option",
        "control --min-arm-samples: a new option",
        "control --min-arm-buckets: a new option",
        "control --trial-blocks: a new option",
        "control --trial-min-blocks: a new option",
        "control --trial-block-rounds: a new option",
        "control --trial-at-limit: a new option",
        # incremental scoring and the lean loader (issue 27)
        "control --incremental: a new option",
        "control explain --incremental: a new option",
        "ingest --slice-rows: a new option",
        "ingest --block-rows: a new option",
        "ingest --cache-every: a new option",
        "control --trial-max-rounds: a new option",
        "lab --trial-blocks: a new option",
        "demo --round-seconds: default 20 -> 15",
        "lab --round-seconds: default 20 -> 15",
        "lab --lookback-buckets: default 12 -> 8",
        "lab --min-buckets: default 4 -> 5",
        "lab --slow: 0 matching options",
        "lab --alternating: default 2 -> 6",
        "lab --fine: 0 matching options",
        "lab --rate: 0 matching options",
        "lab --holdout: default 0.0 -> 0.25",
        "lab --pop: 0 matching options",
        "lab --pops: a new option",
        "lab --hosts-per-pop: a new option",
        "lab --prefixes-per-pop: a new option",
        "lab --lossy: a new option",
        "lab --deep: a new option",
        "lab --lowrtt: a new option",
        "lab --min-hold-buckets: a new option",
        "lab --max-new: a new option",
        "lab --think-time: a new option",
        # eBPF enforcement (docs/enforce.md)
        "agent --enforce: a new option",
        "agent --bpf-cgroup: a new option",
        "agent --bpf-pin-dir: a new option",
        "agent --bpf-object: a new option",
        "lab --enforce: a new option",
        # signing keys that rotate (docs/rollout.md): the agent trusts every key it is given
        "agent --public-key: action _StoreAction -> append",
        "agent --public-key: no longer required",
        "agent --public-key-dir: a new option",
        # client addresses on the wire: full, or the client prefix only (docs/architecture.md)
        "collect --export-addresses: a new option",
    }
    | {
        # explain takes the scoring, decision and trial options after its name too: given, they replace
        # the settings the round that decided the prefix recorded (round_settings, sql/migrations/011)
        f"control explain {flag}: a new option"
        for flag in (
            *("--bucket", "--lookback", "--min-bytes", "--include-app-limited", "--min-bucket-samples"),
            *("--threshold-quantile", "--min-buckets", "--min-duty", "--max-flap", "--min-rtt", "--holdout"),
            *("--min-hold", "--cooldown", "--revert-margin", "--max-bbr-per-pop", "--max-new", "--algorithm"),
            *("--effect-level", "--purity", "--min-arm-samples", "--min-arm-buckets", "--trial-blocks"),
            *("--trial-min-blocks", "--trial-block-rounds", "--trial-at-limit", "--trial-max-rounds", "--expire"),
        )
    }
    | {
        # Kafka over TLS with SASL (docs/security.md): every Kafka client (dyncc_common/kafka_security.py)
        f"{command} {flag}: a new option"
        for command in ("collect", "ingest", "agent", "control", "control rollout", "control kill-switch", "lab")
        for flag in (
            *("--kafka-tls", "--kafka-ca", "--kafka-cert", "--kafka-key", "--kafka-sasl", "--kafka-user"),
            *("--kafka-password-file", "--kafka-password-env"),
        )
    }
    | {
        # metrics listen on 127.0.0.1 unless --metrics-address opens them (docs/security.md)
        f"{command} --metrics-address: a new option"
        for command in ("collect", "agent", "control", "ingest")
    }
    | {
        # what the edge refuses (issue 33 item 3, docs/security.md): the agent's own ranges and the
        # maximum age of a config; the controller re-publishes an unchanged config before that age
        "agent --allow: a new option",
        "agent --deny: a new option",
        "agent --max-config-age: a new option",
        "control --republish-after: a new option",
    }
    | {
        # trials with power (issue 34, docs/report.md "The trial estimator"): the estimator's
        # switches, the anytime-valid interval's scale, the retry after an inconclusive end, the
        # watch of prefixes on BBR; --min-hold now gates the watch's revert (1 h, not 24 h)
        f"{command} --{flag}: a new option"
        for command in ("control", "control explain")
        for flag in (
            "effect-statistic",
            "effect-controls",
            "effect-cuped",
            "effect-scale",
            "trial-retry",
            "holdback",
            "watch-blocks",
        )
    }
    | {"control --min-hold: default '24h' -> 3600"}
)


def test_the_command_line_is_unchanged() -> None:
    assert [p for p in differences(BEFORE, current_cli()) if p not in ADDED_SINCE] == []


def test_a_changed_default_or_flag_is_a_difference() -> None:
    """The comparison can fail: a changed effective default, a lost flag, a new flag."""
    after = current_cli()
    changed = json.loads(json.dumps(BEFORE))
    actions = changed["commands"]["ingest"]["actions"]
    inserters = next(a for a in actions if a["dest"] == "inserters")
    inserters["default"] = 3  # the table says 2
    drain = next(a for a in actions if a["dest"] == "drain")
    drain["option_strings"] = ["--drain-all"]
    changed["effective_defaults"]["collect"]["interval"] = "20s"
    found = differences(changed, after)
    assert "ingest --inserters: default 3 -> 2" in found
    assert "collect --interval: default '20s' -> 10.0" in found
    assert "ingest --drain-all: 0 matching options" in found and "ingest --drain: a new option" in found
