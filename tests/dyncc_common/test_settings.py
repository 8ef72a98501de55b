"""The settings model (dyncc_common.settings): one table -> argparse, TOML loading, docs.

A small component defined here exercises every feature of a row; the real components'
tables are tested where they live.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dyncc_common import settings as S
from dyncc_common import settings_doc, units
from dyncc_common.errors import ConfigError
from dyncc_common.settings import Settings, part, reuse, setting


def _even(value: int, what: str) -> int:
    if value % 2:
        raise ConfigError(f"bad {what} {value}: must be even")
    return value


def _whole(seconds: float, what: str) -> float:
    if seconds != int(seconds):
        raise ConfigError(f"bad {what} {seconds:g}s: must be whole seconds")
    return seconds


@dataclasses.dataclass(frozen=True)
class Publishing(Settings):
    private_key: Path | None = setting(
        None,
        S.PATH,
        "private key that signs configs",
        section="publishing",
        flag="--key",
        dest="private_key",
        metavar="PEM",
    )
    soak: float = setting("10m", S.DURATION, "canary soak time", section="publishing")


@dataclasses.dataclass(frozen=True)
class DemoSettings(Settings):
    """A component with one row of every feature."""

    COMPONENT: ClassVar[str] = "demo"

    config: str | None = setting(None, S.STR, "TOML file with these keys", metavar="FILE", cli_only=True)
    pop: str = setting(None, S.STR, "POP name", required=True)
    interval: float = setting("10s", S.DURATION, "time between polls", section="polling")
    jitter: float = setting(None, S.DURATION, "random offset of each poll", default_text="10% of the interval")
    linger_ms: float = setting("50ms", S.DURATION, "Kafka linger", flag="--linger", convert=lambda s: s * 1000)
    bucket_seconds: int = setting("5m", S.DURATION, "bucket", flag="--bucket", validator=_whole, convert=int)
    queue_max_bytes: int = setting("64MiB", S.SIZE, "bound of the send queue", section="kafka")
    max_rows: int = setting(4096, S.INT, "rows per batch", validator=S.in_range(1, 1_000_000))
    ratio: float = setting(0.25, S.FLOAT, "a fraction")
    sink: str = setting("kafka", S.STR, "where batches go", choices=("kafka", "file", "stdout"))
    port: tuple[int, ...] = setting(
        (), S.INT, "local port", repeatable=True, separator=",", metavar="PORT", validator=S.in_range(1, 65535)
    )
    state: tuple[str, ...] = setting(("established", "syn-recv"), S.STR, "TCP state", repeatable=True)
    deny: tuple[str, ...] = setting((), S.STR, "denied range", repeatable=True, extend=True, metavar="CIDR")
    default_excludes: bool = setting(True, S.BOOL, "skip loopback peers", flag="", negate_flag="--no-default-excludes")
    verbose: bool = setting(False, S.BOOL, "debug logging", short="-v")
    even: int = setting(2, S.INT, "an even number", validator=_even)
    kafka: Mapping[str, Any] = setting({}, S.TABLE, "extra librdkafka settings", flag="")
    publishing: Publishing = part(Publishing)

    def __post_init__(self) -> None:
        if self.jitter is None:
            object.__setattr__(self, "jitter", self.interval * 0.1)
        if self.jitter >= self.interval:
            raise ConfigError(f"bad jitter {self.jitter:g}s: must be smaller than the interval")


POP = {"pop": "lax"}


def parse(argv: list[str], config: str | None = None) -> DemoSettings:
    parser = argparse.ArgumentParser(prog="dyncc demo")
    DemoSettings.add_arguments(parser)
    ns = parser.parse_args(argv)
    return DemoSettings.from_sources(vars(ns), config)


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "demo.toml"
    path.write_text(text)
    return str(path)


def one_line(exc: pytest.ExceptionInfo[ConfigError]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_defaults_are_parsed_once_when_the_class_is_defined(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    real = units.parse_duration

    def counting(text: Any, what: str = "duration") -> float:
        calls.append(text)
        return real(text, what)

    monkeypatch.setattr(units, "parse_duration", counting)
    fields = {f.name: f for f in dataclasses.fields(DemoSettings)}
    assert fields["interval"].default == 10.0
    assert fields["queue_max_bytes"].default == 64 << 20
    assert fields["linger_ms"].default == 50.0  # converted too
    a, b = DemoSettings(), DemoSettings.from_sources(POP, None)
    assert calls == []  # neither building nor loading re-parses a default
    assert (a.interval, a.jitter, b.interval) == (10.0, 1.0, 10.0)
    assert DemoSettings.defaults()["interval"] == 10.0 and calls == []
    DemoSettings.from_sources({**POP, "interval": "5s"}, None)
    assert calls == ["5s"]


def test_precedence_defaults_then_toml_then_flags(tmp_path: Path) -> None:
    config = write(tmp_path, '[demo]\npop = "lax"\ninterval = "20s"\nmax_rows = 100\n')
    cfg = parse(["--max-rows", "7"], config)
    assert cfg.interval == 20.0  # TOML over the default
    assert cfg.max_rows == 7  # the flag over TOML
    assert cfg.queue_max_bytes == 64 << 20  # the default
    assert cfg.jitter == 2.0  # cross-field default from the merged interval
    # flags not given do not reach the namespace, so they never hide a TOML value
    parser = argparse.ArgumentParser()
    DemoSettings.add_arguments(parser)
    assert vars(parser.parse_args([])) == {}


def test_top_level_toml_and_dash_keys(tmp_path: Path) -> None:
    config = write(tmp_path, 'pop = "fra"\nqueue-max-bytes = "1MiB"\nkey = "/k.pem"\nsoak = 30\n')
    cfg = DemoSettings.from_sources({}, config)
    assert (cfg.pop, cfg.queue_max_bytes) == ("fra", 1 << 20)
    assert cfg.publishing == Publishing(private_key=Path("/k.pem"), soak=30.0)  # a part shares the table
    # the dest is an alias of the flag's name ('key' for private_key), as today's --config reads it
    assert DemoSettings.from_sources(
        {}, write(tmp_path, 'pop = "x"\nprivate_key = "/p"\n')
    ).publishing.private_key == Path("/p")


def test_unknown_toml_keys_are_named(tmp_path: Path) -> None:
    config = write(tmp_path, '[demo]\npop = "lax"\nintreval = "5s"\nconfig = "other.toml"\nsoak = "1m"\n')
    with pytest.raises(ConfigError) as exc:
        DemoSettings.from_sources({}, config)
    text = one_line(exc)
    assert text.startswith(config) and "unknown keys 'intreval', 'config'" in text and "dyncc demo" in text


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("max_rows = 1.5", "must be an integer"),
        ('max_rows = "many"', "must be an integer"),
        ('verbose = "yes"', "must be true or false"),
        ('interval = ["5s"]', "must be a single value"),
        ('interval = "5 minutes"', "use e.g."),
        ("ratio = true", "must be a number"),
        ('sink = "carrier-pigeon"', "use one of kafka, file, stdout"),
        ("kafka = 3", "must be a table"),
        ("sink = { name = 'x' }", "must be a string"),
        ("port = [80, 70000]", "must be between 1 and 65535"),
        ("even = 3", "must be even"),
        ('queue_max_bytes = "-1MiB"', "bad queue_max_bytes"),
    ],
)
def test_wrong_toml_types_are_one_line_config_errors(tmp_path: Path, line: str, reason: str) -> None:
    config = write(tmp_path, f'pop = "lax"\n{line}\n')
    with pytest.raises(ConfigError) as exc:
        DemoSettings.from_sources({}, config)
    text = one_line(exc)
    assert text.startswith(f"{config}: ") and reason in text and line.split(" ")[0] in text


def test_bad_flags_name_the_flag() -> None:
    with pytest.raises(ConfigError, match=r"^bad --max-rows 'x': must be an integer$"):
        parse(["--pop", "lax", "--max-rows", "x"])
    with pytest.raises(ConfigError, match=r"^bad --linger '5y'"):
        parse(["--pop", "lax", "--linger", "5y"])
    with pytest.raises(ConfigError, match="smaller than the interval"):  # __post_init__ cross-field check
        parse(["--pop", "lax", "--interval", "1s", "--jitter", "2s"])
    with pytest.raises(SystemExit):  # choices are argparse's for strings
        parse(["--pop", "lax", "--sink", "x"])


def test_duration_and_size_kinds(tmp_path: Path) -> None:
    cfg = parse(["--pop", "lax", "--interval", "250ms", "--linger", "1s", "--queue-max-bytes", "512KiB"])
    assert (cfg.interval, cfg.linger_ms, cfg.queue_max_bytes) == (0.25, 1000.0, 512 << 10)
    config = write(tmp_path, 'pop = "lax"\ninterval = 30\nqueue_max_bytes = 4096\nsoak = "1.5h"\n')
    cfg = DemoSettings.from_sources({}, config)
    assert (cfg.interval, cfg.queue_max_bytes, cfg.publishing.soak) == (30.0, 4096, 5400.0)
    assert isinstance(cfg.interval, float) and isinstance(cfg.queue_max_bytes, int)


def test_validator_sees_the_parsed_value_and_convert_comes_last(tmp_path: Path) -> None:
    assert DemoSettings().bucket_seconds == 300 and isinstance(DemoSettings().bucket_seconds, int)
    cfg = parse(["--pop", "x", "--bucket", "2m"])
    assert cfg.bucket_seconds == 120 and isinstance(cfg.bucket_seconds, int)
    with pytest.raises(ConfigError, match=r"^bad --bucket 1.5s: must be whole seconds$"):
        parse(["--pop", "x", "--bucket", "1500ms"])
    with pytest.raises(ConfigError, match=r": bad bucket 0.5s: must be whole seconds$"):
        DemoSettings.from_sources({}, write(tmp_path, 'pop = "x"\nbucket = 0.5\n'))


def test_repeatable_settings(tmp_path: Path) -> None:
    assert DemoSettings.from_sources(POP).port == ()
    assert parse(["--pop", "x", "--port", "80", "--port", "443,8080"]).port == (80, 443, 8080)
    assert DemoSettings.from_sources({}, write(tmp_path, 'pop = "x"\nport = 443\n')).port == (443,)
    config = write(tmp_path, 'pop = "x"\nport = [80, "81,82"]\nstate = "listen"\n')
    cfg = DemoSettings.from_sources({}, config)
    assert (cfg.port, cfg.state) == ((80, 81, 82), ("listen",))
    assert parse(["--port", "9"], config).port == (9,)  # flags replace the file's list, not extend it
    with pytest.raises(ConfigError, match=r"^bad --port 0: must be between 1 and 65535$"):
        parse(["--pop", "x", "--port", "80,0"])


def test_an_extend_list_adds_flags_to_the_files_list(tmp_path: Path) -> None:
    """extend=True (the deny list): flags add to the file's list (the union, the file's first)."""
    config = write(tmp_path, 'pop = "x"\ndeny = ["192.0.2.0/24", "198.51.100.0/24"]\n')
    assert parse([], config).deny == ("192.0.2.0/24", "198.51.100.0/24")
    both = parse(["--deny", "203.0.113.0/24", "--deny", "192.0.2.0/24"], config).deny
    assert both == ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
    assert parse(["--pop", "x", "--deny", "203.0.113.0/24"]).deny == ("203.0.113.0/24",)
    parser = argparse.ArgumentParser(prog="dyncc demo")
    DemoSettings.add_arguments(parser)
    assert "denied range (flags add to the --config file's list)" in " ".join(parser.format_help().split())


def test_negate_flag(tmp_path: Path) -> None:
    assert DemoSettings.from_sources(POP).default_excludes is True
    assert parse(["--pop", "x", "--no-default-excludes"]).default_excludes is False
    for text in ("no_default_excludes = true", "no-default-excludes = true", "default_excludes = false"):
        assert DemoSettings.from_sources({}, write(tmp_path, f'pop = "x"\n{text}\n')).default_excludes is False
    assert DemoSettings.from_sources({}, write(tmp_path, 'pop = "x"\nno_default_excludes = false\n')).default_excludes
    parser = argparse.ArgumentParser()
    DemoSettings.add_arguments(parser)
    with pytest.raises(SystemExit):  # only the negative flag exists on the command line
        parser.parse_args(["--default-excludes"])


def test_required_is_satisfied_by_toml_or_a_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        parse([])
    assert one_line(exc) == "--pop is required (or pop in the --config file)"
    assert parse([], write(tmp_path, 'pop = "lax"\n')).pop == "lax"
    assert parse(["--pop", "fra"], write(tmp_path, 'pop = "lax"\n')).pop == "fra"


def test_help_shows_each_default_once() -> None:
    parser = argparse.ArgumentParser(prog="dyncc demo")
    DemoSettings.add_arguments(parser)
    text = " ".join(parser.format_help().split())
    for expected in (
        "time between polls [default: 10s]",
        "bound of the send queue [default: 64MiB]",
        "random offset of each poll [default: 10% of the interval]",
        "rows per batch [default: 4096]",
        "TCP state [default: established,syn-recv]",
        "canary soak time [default: 10m]",
        "--key PEM",
        "--sink {kafka,file,stdout}",
    ):
        assert expected in text, expected
    assert "debug logging [default" not in text  # nothing to say for a switch
    assert "--kafka" not in text  # TOML only
    assert "polling:" in text and "publishing:" in text  # sections are argument groups


def test_only_and_suppress_for_subparsers() -> None:
    """A subcommand repeats some flags; a value given before the action is kept (SUPPRESS defaults)."""
    parser = argparse.ArgumentParser()
    DemoSettings.add_arguments(parser)
    sub = parser.add_subparsers(dest="action").add_parser("advance")
    DemoSettings.add_arguments(sub, only={"pop", "private_key"}, suppress=True)
    ns = vars(parser.parse_args(["--pop", "lax", "--key", "/a", "advance"]))
    assert ns == {"pop": "lax", "private_key": "/a", "action": "advance"}
    ns = vars(parser.parse_args(["--pop", "lax", "advance", "--key", "/b"]))
    cfg = DemoSettings.from_sources(ns)  # 'action' is not a setting: ignored
    assert (cfg.pop, cfg.publishing.private_key) == ("lax", Path("/b"))
    assert "--key" not in sub.format_help()
    with pytest.raises(TypeError):
        DemoSettings.add_arguments(argparse.ArgumentParser(), only={"no_such"})


STORE_URL = S.Setting(None, S.STR, "store URL", flag="--clickhouse", metavar="URL")


@dataclasses.dataclass(frozen=True)
class SchemaLike(Settings):
    COMPONENT: ClassVar[str] = "schema"
    clickhouse: str = reuse(STORE_URL, required=True)


@dataclasses.dataclass(frozen=True)
class ReportLike(Settings):
    COMPONENT: ClassVar[str] = "report"
    clickhouse: str | None = reuse(STORE_URL)
    pop: str = setting("", S.STR, "only this POP", validator=lambda v, what: v.lower())


def test_a_shared_row_is_defined_once_and_used_twice(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--clickhouse is required"):
        SchemaLike.from_sources({})
    assert SchemaLike.from_sources({"clickhouse": "chdb:///x"}).clickhouse == "chdb:///x"
    assert ReportLike.from_sources({}).clickhouse is None
    # a [schema] table is not read by `dyncc report`: it takes the top level, and schema its own table
    config = write(tmp_path, 'clickhouse = "top"\npop = "LAX"\n[schema]\nclickhouse = "mine"\n')
    assert SchemaLike.from_sources({}, config).clickhouse == "mine"
    with pytest.raises(ConfigError, match="unknown key 'schema'"):
        ReportLike.from_sources({}, config)
    assert ReportLike.from_sources({}, write(tmp_path, 'pop = "LAX"\n')).pop == "lax"  # validators may normalise


def test_table_mistakes_fail_at_first_use() -> None:
    @dataclasses.dataclass(frozen=True)
    class Clash(Settings):
        a: int = setting(1, S.INT, "a", toml="b")
        b: int = setting(2, S.INT, "b")

    with pytest.raises(TypeError, match="'b' names two settings"):
        Clash.from_sources({})

    @dataclasses.dataclass(frozen=True)
    class Bare(Settings):
        a: int = 1

    with pytest.raises(TypeError, match="needs setting"):
        Bare.from_sources({})
    with pytest.raises(TypeError, match="kind"):
        setting(1, "integer", "x")


def test_markdown_section_and_generated_doc() -> None:
    text = DemoSettings.markdown()
    assert text.startswith("## `dyncc demo`\n\nA component with one row of every feature.")
    for row in (
        "| `--interval` | `interval` | duration | `10s` | time between polls |",
        "| `--key` | `key`, `private_key` | path |  | private key that signs configs |",
        "| `--port` | `port` | list of int |  | local port |",
        "| `--deny` | `deny` | list of str (flags add to the file's) |  | denied range |",
        "| `--no-default-excludes` | `default_excludes` | bool | `true` | skip loopback peers |",
        "| `--pop` | `pop` | str | required | POP name |",
        "| — | `kafka` | table |  | extra librdkafka settings |",
        "| `--config` | — | str |  | TOML file with these keys |",
        "| `--sink` | `sink` | str | `kafka` | where batches go (one of `kafka`, `file`, `stdout`) |",
        "| `--jitter` | `jitter` | duration | 10% of the interval | random offset of each poll |",
    ):
        assert row in text, row
    headings = [line for line in text.splitlines() if line.startswith("### ")]
    assert headings == ["### Options", "### Polling", "### Kafka", "### Publishing"]
    doc = settings_doc.render([f"{__name__}:DemoSettings"])
    assert doc.startswith("# dyncc settings\n") and "Generated from the settings tables — do not edit" in doc
    assert text in doc
    assert 'except a list whose type says "flags add to the file\'s" (the deny list)' in " ".join(doc.split())
    with pytest.raises(TypeError):
        settings_doc.load(f"{__name__}:POP")


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False))
def test_durations_round_trip_through_their_text(seconds: float) -> None:
    text = S.format_value(S.DURATION, seconds)
    assert S.parse_value(S.DURATION, text, "x") == seconds, text


@given(st.integers(min_value=0, max_value=1 << 53) | st.integers(0, 1 << 20).map(lambda n: n << 30))
def test_sizes_round_trip_through_their_text(size: int) -> None:
    text = S.format_value(S.SIZE, size)
    assert S.parse_value(S.SIZE, text, "x") == size, text


@given(
    st.sampled_from([S.DURATION, S.SIZE]),
    st.integers(0, 10_000),
    st.sampled_from(["", "ms", "s", "m", "h", "d", "k", "KiB", "M", "MiB", "G", "GiB", "b"]),
)
def test_a_written_default_round_trips(kind: str, n: int, unit: str) -> None:
    """default as written -> value -> text -> the same value (what the docs show parses back)."""
    text = f"{n}{unit}"
    try:
        value = S.parse_value(kind, text, "default")
    except ConfigError:
        return  # a size unit on a duration or the other way round
    assert S.parse_value(kind, S.format_value(kind, value), "default") == value


def test_import_is_light() -> None:
    """The collect start-up path: no tomllib, logging or pathlib until a file or a path is parsed."""
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import dyncc_common.settings\n"
        "print(sorted({'tomllib', 'logging', 'pathlib', 'numpy'} & (set(sys.modules) - before)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
