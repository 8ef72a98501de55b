"""The settings model: one frozen dataclass per component, and its fields are the settings table.

A field made with `setting(default, kind, help, ...)` carries one `Setting` row: the default
as a person writes it ("10s", "64MiB", 24), parsed by its kind once when the class is
defined; the help; and its section, flag, TOML key and aliases, validator, choices and so on.
Everything else is built from the rows by the `Settings` mixin:

    add_arguments(parser, only=None, suppress=False)
        argparse options, every default argparse.SUPPRESS (a flag counts only when given);
        the help gets "[default: ...]" appended
    from_sources(flags, config_path)
        defaults < the TOML file ([<component>] table, else the top level) < the flags;
        each value parsed by kind, then the row's validator, then the class's __post_init__
        for cross-field checks.  A bad value is a ConfigError with a one-line reason.
        A list (repeatable) given as flags replaces the file's list, unless its row says
        `extend=True`: then the flags add to the file's list (the union, the file's first).
    markdown()
        the component's section of docs/settings.md (dyncc_common.settings_doc)

Kinds: str int float bool duration size path table (durations and sizes go through
dyncc_common.units); the kinds, `parse_value`, `format_value` and the validators `in_range`,
`at_least` live in dyncc_common.setting_kinds and are re-exported here.  A `repeatable` row
holds a tuple of its kind; `part(Cls)` nests another settings class whose rows share the
component's flags and TOML table.
REGISTRY names each component's class by "module:Class" for the doc generator and the drift
tests, which import them lazily.  Stdlib only at import: tomllib is imported when a config
file is read, pathlib when a path is parsed (`dyncc collect --once` start-up is measured).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, NamedTuple, Self

from dyncc_common.errors import ConfigError
from dyncc_common.setting_kinds import (
    BOOL,
    DURATION,
    FLOAT,
    INT,
    KINDS,
    PATH,
    SIZE,
    STR,
    TABLE,
    Validator,
    at_least,
    format_value,
    in_range,
    parse_value,
)

__all__ = [
    "BOOL",
    "DURATION",
    "FLOAT",
    "INT",
    "KINDS",
    "PATH",
    "REGISTRY",
    "SIZE",
    "STR",
    "TABLE",
    "Setting",
    "Settings",
    "at_least",
    "format_value",
    "in_range",
    "parse_value",
    "part",
    "read_toml",
    "reuse",
    "setting",
]

#: component -> "module:Class" of each component wired to a table, imported only by the doc
#: generator and the drift tests (tests/contract/test_settings.py).
REGISTRY: dict[str, str] = {
    "collect": "collector.telemetry.settings:CollectSettings",
    "agent": "collector.agent.settings:AgentSettings",
    "ingest": "controller.ingest.settings:IngestSettings",
    "access-log": "controller.ingest.settings:AccessLogSettings",
    "control": "controller.control.settings:ControlSettings",
    "control explain": "controller.control.settings:ExplainSettings",
    "control keygen": "controller.rollout.settings:KeygenSettings",
    "control rollout": "controller.rollout.settings:RolloutActionSettings",
    "control kill-switch": "controller.rollout.settings:KillSwitchSettings",
    "report": "controller.report.settings:ReportSettings",
    "schema": "controller.store.settings:SchemaSettings",
    "lab": "dyncc.lab.settings:LabSettings",
    "demo": "dyncc.lab.settings:DemoSettings",
}


class Setting(NamedTuple):
    """One row of a settings table (the field's name is filled in by the table).

    A NamedTuple, not a dataclass: much cheaper to define, and every `dyncc collect --once`
    defines it."""

    default: Any  # as a person writes it; parsed by `kind` into the field's default
    kind: str
    help: str  # without the default: "[default: ...]" is appended for --help
    section: str = ""  # argparse group title and docs heading; "" = the parser's own options
    flag: str | None = None  # None: "--<name>"; "": no positive flag; no leading "-": a positional
    short: str | None = None  # "-v"
    dest: str | None = None  # argparse dest = key in `flags`; None: from the long flag, else the name
    toml: str | None = None  # TOML key; None: from the long flag, else the name ('-' or '_' both read)
    toml_aliases: tuple[str, ...] = ()  # also read (the dest is always one)
    validator: Validator | None = None  # given values only, each item when repeatable: check or normalise
    convert: Callable[[Any], Any] | None = None  # last, also for the default: seconds -> ms, float -> int
    choices: tuple[Any, ...] = ()
    metavar: str | None = None
    repeatable: bool = False  # action="append"; a TOML list or a single value
    separator: str = ""  # repeatable: also split each string item on this ("80,443")
    extend: bool = False  # repeatable: flags add to the TOML file's list (the union) instead of replacing it
    negate_flag: str | None = None  # "--no-default-excludes": stores False; its TOML key is inverted
    negate_help: str | None = None  # --help of the negate flag (default: "the opposite of --flag")
    required: bool = False  # a flag or the TOML file must give it
    cli_only: bool = False  # never read from TOML (--config itself, positionals, actions)
    default_text: str | None = None  # shown instead of the default ("10% of the interval")
    exclusive: str = ""  # argparse mutually exclusive group of this name
    name: str = ""

    @property
    def long_flag(self) -> str | None:
        if self.flag is None:
            return "--" + self.name.replace("_", "-")
        return self.flag if self.flag.startswith("--") else None

    @property
    def positional(self) -> bool:
        return bool(self.flag) and not str(self.flag).startswith("-")

    @property
    def key(self) -> str:
        """The dest: the key of this setting in `flags`."""
        if self.dest:
            return self.dest
        long = self.long_flag
        return long[2:].replace("-", "_") if long else self.name

    @property
    def toml_key(self) -> str:
        if self.toml:
            return self.toml
        long = self.long_flag
        return long[2:].replace("-", "_") if long else self.name

    @property
    def option_strings(self) -> list[str]:
        """Flags that set the value (the negate flag apart)."""
        if self.positional:
            return [str(self.flag)]
        out = [self.short] if self.short else []
        long = self.long_flag
        return [*out, long] if long else out

    def display_default(self) -> str | None:
        """The default as shown in --help and the docs, or None when there is nothing to show."""
        if self.default_text is not None:
            return self.default_text
        d = self.default
        if d is None or d == "" or (isinstance(d, list | tuple | dict) and not d):
            return None
        if isinstance(d, bool):
            return "true" if d else "false"
        if isinstance(d, list | tuple):
            return ",".join(str(x) for x in d)
        return str(d)

    def field(self, **changes: Any) -> Any:
        """A new dataclass field for this row (shared rows are reused this way)."""
        row = self._replace(**changes) if changes else self
        value = row.parse_default()
        meta = {"setting": row}
        if isinstance(value, dict):
            return dataclasses.field(default_factory=lambda: dict(value), metadata=meta)
        return dataclasses.field(default=value, metadata=meta)

    def parse_default(self) -> Any:
        if self.kind not in KINDS:
            raise TypeError(f"setting kind {self.kind!r}: use one of {', '.join(KINDS)}")
        if self.default is None:
            return None
        return self.finish(self.parse(self.default, f"default of {self.name or 'a setting'}"))

    def value(self, raw: Any, what: str, inverted: bool = False) -> Any:
        """A given flag or TOML value -> the field's value: parse, validator, convert (ConfigError)."""
        parsed = self.parse(raw, what)
        return self.finish(self.check(not parsed if inverted else parsed, what))

    def parse(self, raw: Any, what: str) -> Any:
        """A flag, TOML or default value -> a value of the kind (ConfigError naming `what`)."""
        if self.repeatable:
            items = list(raw) if isinstance(raw, list | tuple) else [raw]
            if self.separator:
                items = [p for x in items for p in (x.split(self.separator) if isinstance(x, str) else [x])]
            return tuple(self._one(x, what) for x in items)
        if isinstance(raw, list | tuple):
            raise ConfigError(f"bad {what} {raw!r}: must be a single value")
        return self._one(raw, what)

    def _one(self, raw: Any, what: str) -> Any:
        value = parse_value(self.kind, raw, what)
        if self.choices and value not in self.choices:
            raise ConfigError(f"bad {what} {raw!r}: use one of {', '.join(map(str, self.choices))}")
        return value

    def finish(self, value: Any) -> Any:
        """The row's convert, on each item when repeatable."""
        if self.convert is None or value is None:
            return value
        if self.repeatable:
            return tuple(self.convert(x) for x in value)
        return self.convert(value)

    def check(self, value: Any, what: str) -> Any:
        """The validator on a given value (each item of a repeatable one)."""
        if self.validator is None or value is None:
            return value
        if self.repeatable:
            return tuple(self.validator(x, what) for x in value)
        return self.validator(value, what)


def setting(default: Any, kind: str, help: str, **kw: Any) -> Any:
    """A dataclass field holding `default` parsed by `kind`, with its Setting row as metadata."""
    return Setting(default, kind, help, **kw).field()


def reuse(row: Setting, **changes: Any) -> Any:
    """A field for a shared row (STORE_URL, KAFKA_BROKERS, ...), optionally changed for this use."""
    return row.field(**changes)


# Rows every long-running command shares (used with reuse()).
CONFIG_FILE = Setting(
    None,
    STR,
    "TOML file with the same keys as the long options; command-line flags override it",
    metavar="FILE",
    cli_only=True,
)
VERBOSE = Setting(False, BOOL, "debug logging", short="-v")


def part(cls: type[Settings]) -> Any:
    """A nested settings object: its rows are flags and TOML keys of the enclosing component."""
    return dataclasses.field(default_factory=cls, metadata={"settings_part": cls})


# ---- the mixin -----------------------------------------------------------------------------


class _Row:
    """A row in its class: hashed by identity (a default may be a list)."""

    __slots__ = ("default", "path", "setting")

    def __init__(self, path: tuple[str, ...], setting: Setting, default: Any) -> None:
        self.path = path  # part names from the outer class down to the field
        self.setting = setting
        self.default = default  # the field's default, parsed once when the class was defined


class _Table(NamedTuple):
    rows: tuple[_Row, ...]
    by_key: dict[str, _Row]  # dest -> row
    by_toml: dict[str, tuple[_Row, bool]]  # TOML key -> (row, inverted)


_TABLES: dict[type, _Table] = {}


def _norm(key: str) -> str:
    return key.replace("-", "_")


class Settings:
    """Mixin for a component's frozen settings dataclass (see the module docstring)."""

    COMPONENT: ClassVar[str] = ""  # "collect": the TOML table and the name in messages

    @classmethod
    def _rows(cls, path: tuple[str, ...] = ()) -> list[_Row]:
        rows: list[_Row] = []
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if "setting" in f.metadata:
                row = f.metadata["setting"]._replace(name=f.name)
                default: Any = f.default
                if f.default_factory is not dataclasses.MISSING:
                    default = f.default_factory()
                rows.append(_Row((*path, f.name), row, default))
            elif "settings_part" in f.metadata:
                rows.extend(f.metadata["settings_part"]._rows((*path, f.name)))
            elif f.init:
                raise TypeError(f"{cls.__name__}.{f.name}: a settings field needs setting(...) or part(...)")
        return rows

    @classmethod
    def _table(cls) -> _Table:
        table = _TABLES.get(cls)
        if table is not None:
            return table
        rows = tuple(cls._rows())
        by_key: dict[str, _Row] = {}
        by_toml: dict[str, tuple[_Row, bool]] = {}

        def claim(mapping: dict[str, Any], key: str, value: Any, row: _Row) -> None:
            old = mapping.get(key)
            if old is not None and (old[0] if isinstance(old, tuple) else old) is not row:
                raise TypeError(f"{cls.__name__}: {key!r} names two settings")
            mapping[key] = value

        for row in rows:
            s = row.setting
            claim(by_key, s.key, row, row)
            if s.cli_only:
                continue
            for key in (s.toml_key, s.key, *s.toml_aliases):
                claim(by_toml, _norm(key), (row, False), row)
            if s.negate_flag:
                claim(by_toml, _norm(s.negate_flag.lstrip("-")), (row, True), row)
        table = _Table(rows, by_key, by_toml)
        _TABLES[cls] = table
        return table

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """dest -> the default, as parsed when the class was defined."""
        return {row.setting.key: row.default for row in cls._table().rows}

    # ---- argparse ------------------------------------------------------------------------

    @classmethod
    def add_arguments(
        cls, parser: argparse.ArgumentParser, only: Iterable[str] | None = None, suppress: bool = False
    ) -> None:
        """Add the flags (every default SUPPRESS).  only: these dests; suppress: hide them from --help."""
        wanted = None if only is None else set(only)
        known = {row.setting.key for row in cls._table().rows}
        if wanted is not None and wanted - known:
            raise TypeError(f"{cls.__name__}: no settings {sorted(wanted - known)}")
        groups: dict[str, Any] = {"": parser}
        exclusive: dict[tuple[str, str], Any] = {}
        for row in cls._table().rows:
            s = row.setting
            if wanted is not None and s.key not in wanted:
                continue
            if not s.option_strings and not s.negate_flag:
                continue  # TOML only
            if s.section not in groups:
                groups[s.section] = parser.add_argument_group(s.section)
            container = groups[s.section]
            if s.exclusive:
                group_key = (s.section, s.exclusive)
                if group_key not in exclusive:
                    exclusive[group_key] = container.add_mutually_exclusive_group()
                container = exclusive[group_key]
            text = argparse.SUPPRESS if suppress else _help(s)
            if s.positional:
                kw: dict[str, Any] = {"help": text, "default": argparse.SUPPRESS}
                if s.choices:
                    kw["choices"] = s.choices
                if s.metavar:
                    kw["metavar"] = s.metavar
                container.add_argument(s.key, **kw)
                continue
            if s.option_strings:
                kw = {"dest": s.key, "default": argparse.SUPPRESS, "help": text}
                if s.kind == BOOL:
                    kw.update(action="store_const", const=True)
                else:
                    if s.repeatable:
                        kw["action"] = "append"
                    if s.choices and s.kind == STR:
                        kw["choices"] = s.choices
                    if s.metavar:
                        kw["metavar"] = s.metavar
                container.add_argument(*s.option_strings, **kw)
            if s.negate_flag:
                if s.negate_help is not None:
                    neg_help = s.negate_help
                else:
                    neg_help = f"the opposite of {s.option_strings[-1]}" if s.option_strings else s.help
                neg_help = argparse.SUPPRESS if suppress else neg_help.replace("%", "%%")
                container.add_argument(
                    s.negate_flag,
                    dest=s.key,
                    action="store_const",
                    const=False,
                    default=argparse.SUPPRESS,
                    help=neg_help,
                )

    # ---- sources -------------------------------------------------------------------------

    @classmethod
    def from_sources(cls, flags: Mapping[str, Any], config_path: str | None = None) -> Self:
        """defaults < the TOML file < the flags (dest -> value; None = not given) -> a checked instance."""
        table = cls._table()
        given: dict[_Row, Any] = {}
        if config_path:
            doc = read_toml(config_path, cls.COMPONENT)
            unknown: list[str] = []
            for key, raw in doc.items():
                hit = table.by_toml.get(_norm(key))
                if hit is None:
                    unknown.append(repr(key))
                    continue
                row, inverted = hit
                try:
                    given[row] = row.setting.value(raw, key, inverted)
                except ConfigError as exc:
                    raise ConfigError(f"{config_path}: {exc}") from None
            if unknown:
                name = f"'dyncc {cls.COMPONENT}'" if cls.COMPONENT else cls.__name__
                keys = "keys" if len(unknown) > 1 else "key"
                raise ConfigError(f"{config_path}: unknown {keys} {', '.join(unknown)} for {name}")
        for key, raw in flags.items():
            row_or_none = table.by_key.get(key)
            if row_or_none is None or raw is None:
                continue  # not a setting (the subcommand, --config, ...) or not given
            s = row_or_none.setting
            what = s.option_strings[-1] if s.option_strings else (s.negate_flag or key)
            value = s.value(raw, what)
            if s.extend and row_or_none in given:  # the file's items first, then the flags' new ones
                value = tuple(dict.fromkeys((*given[row_or_none], *value)))
            given[row_or_none] = value
        for row in table.rows:
            s = row.setting
            if s.required and row not in given:
                flag = s.option_strings[-1] if s.option_strings else s.key
                where = "" if s.cli_only else f" (or {s.toml_key} in the --config file)"
                raise ConfigError(f"{flag} is required{where}")
        return cls._build((), given)

    @classmethod
    def _build(cls, path: tuple[str, ...], given: Mapping[_Row, Any]) -> Self:
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if "settings_part" in f.metadata:
                kwargs[f.name] = f.metadata["settings_part"]._build((*path, f.name), given)
        for row, value in given.items():
            if row.path[:-1] == path:
                kwargs[row.path[-1]] = value
        return cls(**kwargs)

    # ---- docs ----------------------------------------------------------------------------

    @classmethod
    def markdown(cls) -> str:
        """This component's section of docs/settings.md: one table per section."""
        title = f"dyncc {cls.COMPONENT}" if cls.COMPONENT else cls.__name__
        doc = (cls.__doc__ or "").strip().split("\n\n")[0]
        lines = [f"## `{title}`", ""]
        if doc and not doc.startswith(f"{cls.__name__}("):  # not dataclass's generated signature
            lines += [" ".join(doc.split()), ""]
        sections: dict[str, list[Setting]] = {"": []}  # the parser's own options first, as in --help
        for row in cls._table().rows:
            sections.setdefault(row.setting.section, []).append(row.setting)
        for section, rows in sections.items():
            if not rows:
                continue
            lines += [f"### {section[:1].upper() + section[1:] if section else 'Options'}", ""]
            lines += ["| flag | TOML key | type | default | description |", "|---|---|---|---|---|"]
            for s in rows:
                flags = ", ".join(f"`{f}`" for f in [*s.option_strings, *([s.negate_flag] if s.negate_flag else [])])
                names = dict.fromkeys([s.toml_key, *s.toml_aliases, s.key])
                keys = "—" if s.cli_only else ", ".join(f"`{k}`" for k in names)
                kind = f"list of {s.kind}" if s.repeatable else s.kind
                if s.extend:
                    kind += " (flags add to the file's)"
                shown = s.display_default()
                if s.required:
                    default = "required"
                elif shown is None:
                    default = ""
                else:  # a value in code style; prose ("10% of the interval") as it is
                    default = shown if s.default_text is not None else f"`{shown}`"
                text = s.help + (f" (one of {', '.join(f'`{c}`' for c in s.choices)})" if s.choices else "")
                if s.negate_flag and s.negate_help:
                    text += f" `{s.negate_flag}`: {s.negate_help}."
                cells = [flags or "—", keys, kind, default, text]
                lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
            lines.append("")
        return "\n".join(lines)


#: appended to the --help of an `extend` row
_EXTEND_HELP = "flags add to the --config file's list"


def _help(s: Setting) -> str:
    text = f"{s.help} ({_EXTEND_HELP})" if s.extend else s.help
    shown = s.display_default()
    if shown is not None and s.kind != BOOL:
        text = f"{text} [default: {shown}]" if text else f"[default: {shown}]"
    return text.replace("%", "%%")  # argparse formats help with %


def read_toml(path: str, component: str) -> dict[str, Any]:
    """The component's table of a TOML file ([<component>], else the top level); ConfigError."""
    import tomllib

    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {path} is not valid TOML: {exc}") from exc
    table = doc.get(component) if component else None
    return table if isinstance(table, dict) else doc
