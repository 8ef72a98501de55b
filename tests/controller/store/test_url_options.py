"""Store URL options are parsed once into typed fields and checked before anything connects
(issue 33 item 6): an unknown option (`secrue=1`, a typo of `secure`), one given twice, one of
the other back end or a bad value (`connect_timeout=abc`) is one line and exit 2 for every
command that takes a store URL; good options reach the real servers as typed values."""

from __future__ import annotations

import math
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.store import StoreError, open_store, parse_store_url
from controller.store.url import CHDB_OPTIONS, CLICKHOUSE_OPTIONS
from dyncc.cli import main as dyncc_main
from tests.conftest import CLICKHOUSE_URL

BASE = CLICKHOUSE_URL.partition("?")[0]


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (f"{BASE}?secrue=1", "unknown option 'secrue' (did you mean secure=?)"),
        (f"{BASE}?connect_timeout=abc", "bad connect_timeout='abc' (seconds, more than 0)"),
        (f"{BASE}?timeout=0", "bad timeout='0' (seconds, more than 0)"),
        (f"{BASE}?timeout=nan", "bad timeout='nan'"),
        (f"{BASE}?secure=1&secure=0", "option secure= given twice"),
        (f"{BASE}?database=other", "database= is for chdb://"),
        (f"{BASE}?ttl=maybe", "bad ttl='maybe' (1 or 0)"),
        (f"{BASE}?secure", "bad options 'secure'"),
        ("chdb:///tmp/h3-none?databse=x", "unknown option 'databse' (did you mean database=?)"),
        ("chdb:///tmp/h3-none?secure=1", "secure= needs a ClickHouse server"),
        ("chdb:///tmp/h3-none?zzz=1", "unknown option 'zzz' (known: database, ttl)"),
    ],
)
def test_a_bad_option_is_a_store_error_naming_it(url: str, reason: str) -> None:
    with pytest.raises(StoreError) as exc:
        parse_store_url(url)
    assert reason in str(exc.value) and "\n" not in str(exc.value)


def test_options_are_typed_fields(tmp_path: Path) -> None:
    url = parse_store_url("clickhouse://u@h:9000/d?connect_timeout=2.5&timeout=30&alt_hosts=h2:9000&ttl=off")
    assert (url.connect_timeout, url.timeout, url.alt_hosts, url.ttl, url.secure, url.cluster) == (
        2.5, 30.0, "h2:9000", False, False, None,
    )  # fmt: skip
    args = url.connect_args()
    assert (args["connect_timeout"], args["send_receive_timeout"], args["alt_hosts"]) == (2.5, 30.0, "h2:9000")
    assert parse_store_url("clickhouse://h/d").connect_args()["connect_timeout"] == 5.0
    chdb = parse_store_url(f"chdb://{tmp_path}?database=x&ttl=off")
    assert (chdb.database, chdb.ttl, chdb.path) == ("x", False, str(tmp_path))
    assert parse_store_url(f"chdb://{tmp_path}").ttl is True
    # the settings' check at start reads no file: a deployed ca_certs / password_file may be elsewhere
    remote = parse_store_url(
        "clickhouse://u@h/d?secure=1&ca_certs=/nonexistent/ca&password_file=/nonexistent/pw", files=False
    )
    assert (remote.secure, remote.ca_certs, remote.password) == (True, "/nonexistent/ca", "")
    with pytest.raises(StoreError, match="is not a file"):
        parse_store_url("clickhouse://u@h/d?secure=1&ca_certs=/nonexistent/ca")


NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)


@given(NAMES, st.sampled_from(["clickhouse://h/d", "chdb:///tmp/h3-none"]))
def test_every_name_but_the_known_ones_is_refused(name: str, base: str) -> None:
    known = CLICKHOUSE_OPTIONS if base.startswith("clickhouse") else CHDB_OPTIONS
    if name in known:
        return
    with pytest.raises(StoreError, match=f"store URL '{base}\\?{name}=1': "):
        parse_store_url(f"{base}?{name}=1")


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_timeout_is_a_positive_finite_number_of_seconds(seconds: float) -> None:
    url = f"clickhouse://h/d?timeout={urllib.parse.quote(repr(seconds))}"
    if math.isfinite(seconds) and seconds > 0:
        assert parse_store_url(url).timeout == seconds
    else:
        with pytest.raises(StoreError, match="bad timeout="):
            parse_store_url(url)


def test_good_options_reach_the_server() -> None:
    """The typed options open the real ClickHouse 18.16 (a timeout of 0.001 s proves they are used)."""
    store = open_store(f"{BASE}?connect_timeout=2&timeout=30")
    try:
        assert store.version() >= (18, 16)
    finally:
        store.close()
    slow = open_store(f"{BASE}?timeout=0.001")
    try:
        with pytest.raises(StoreError):
            slow.query_rows("SELECT count() FROM numbers(1000000000) WHERE sleepEachRow(0) = 0")
    finally:
        slow.close()


COMMANDS = [
    ["schema", "apply", "--clickhouse", "{url}"],
    ["ingest", "--clickhouse", "{url}", "--kafka", "127.0.0.1:1"],
    ["access-log", "--clickhouse", "{url}", "--pop", "lax", "--host", "e1", "{log}"],
    ["control", "--clickhouse", "{url}", "--once", "--dry-run"],
    ["control", "--clickhouse", "{url}", "explain", "--pop", "lax", "--prefix", "192.0.2.0/24"],
    ["control", "--clickhouse", "{url}", "kill-switch", "--pop", "lax", "--publish-dir", "{tmp}"],
    ["control", "--clickhouse", "{url}", "rollout", "status"],
    ["control", "--clickhouse", "{url}", "pins"],
    ["report", "--clickhouse", "{url}", "-o", "{tmp}/r.html"],
]


def command_id(argv: list[str]) -> str:
    return " ".join(a for a in argv[:5] if not a.startswith(("-", "{")))


@pytest.mark.parametrize("argv", COMMANDS, ids=command_id)
@pytest.mark.parametrize(
    ("option", "reason"),
    [("secrue=1", "unknown option 'secrue'"), ("connect_timeout=abc", "bad connect_timeout='abc'")],
)
def test_every_store_command_refuses_a_bad_option_at_start(
    argv: list[str], option: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "access.log"
    log.write_text("")
    url = f"{BASE}?{option}"
    filled = [a.format(url=url, tmp=tmp_path, log=log) for a in argv]
    assert dyncc_main(filled) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and reason in err and "Traceback" not in err, err
