"""ClickHouse over TLS with a password file: store URL options, a private TLS server (ports 19620-19623),
the errors a person gets when TLS or the password is wrong, and the password never shown."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from controller.store import StoreError, open_store, parse_store_url
from controller.store.columns import StrColumn
from controller.store.migrate import apply_migrations
from dyncc.cli import main
from tests.conftest import unique_name
from tests.support.clickhouse_tls import TlsClickHouse
from tests.support.private_server import DEPLOY

TCP_PORT = 19620  # http 19621, interserver 19622, TLS 19623
SECRET = "dsec-unit-Secret-0451"


@pytest.fixture(scope="module")
def tls_ch() -> Iterator[TlsClickHouse]:
    server = TlsClickHouse(TCP_PORT)
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "pw"
    path.write_text(SECRET + "\n")
    return path


# ---- URL options (no server) --------------------------------------------------------------


def test_password_file_is_read_and_never_shown(secret_file: Path) -> None:
    url = parse_store_url(f"clickhouse://u@db.example:9440/d?secure=1&password_file={secret_file}")
    assert url.password == SECRET
    assert url.secure and url.port == 9440
    args = url.connect_args()
    assert args["secure"] is True and args["verify"] is True and args["password"] == SECRET
    for shown in (repr(url), str(url), url.redacted(), repr(dataclasses.replace(url, port=1))):
        assert SECRET not in shown
    assert url.redacted() == "clickhouse://u@db.example:9440/d?secure=1"


def test_default_ports_and_tls_arguments(tmp_path: Path) -> None:
    assert parse_store_url("clickhouse://h/d").port == 9000
    assert "secure" not in parse_store_url("clickhouse://h/d").connect_args()
    ca = tmp_path / "ca.crt"
    ca.write_text("x")
    args = parse_store_url(f"clickhouse://h/d?secure=true&verify=0&ca_certs={ca}").connect_args()
    assert (args["port"], args["verify"], args["ca_certs"]) == (9440, False, str(ca))


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("secure=maybe", "bad secure='maybe'"),
        ("ca_certs=/etc/hostname", "add secure=1"),
        ("verify=0", "add secure=1"),
        ("secure=1&ca_certs=/nonexistent/ca.crt", "is not a file"),
        ("password_file=/nonexistent/pw", "cannot read password_file /nonexistent/pw: No such file"),
    ],
)
def test_bad_tls_options(query: str, reason: str) -> None:
    with pytest.raises(StoreError, match=reason):
        parse_store_url(f"clickhouse://u@h:9440/d?{query}")


def test_password_file_errors_never_quote_the_password(tmp_path: Path, secret_file: Path) -> None:
    with pytest.raises(StoreError) as exc:
        parse_store_url(f"clickhouse://u:{SECRET}@h/d?password_file={secret_file}")
    assert "a password and a password_file" in str(exc.value) and SECRET not in str(exc.value)
    (tmp_path / "two").write_text(f"{SECRET}\nmore\n")
    with pytest.raises(StoreError, match="more than one line") as exc:
        parse_store_url(f"clickhouse://u@h/d?password_file={tmp_path / 'two'}")
    assert SECRET not in str(exc.value)
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(StoreError, match="is empty"):
        parse_store_url(f"clickhouse://u@h/d?password_file={tmp_path / 'empty'}")
    # a password in the URL itself is *** in every error about the URL
    with pytest.raises(StoreError) as exc:
        parse_store_url(f"clickhouse://u:{SECRET}@h/bad-db")
    assert SECRET not in str(exc.value) and "u:***@h" in str(exc.value)


# ---- the private TLS server -----------------------------------------------------------------


def test_migrations_and_round_trip_over_tls(tls_ch: TlsClickHouse, caplog: pytest.LogCaptureFixture) -> None:
    store = open_store(tls_ch.url(unique_name("tls")))
    try:
        result = apply_migrations(store)
        assert result.applied and store.query_rows("SELECT count() FROM schema_migrations")[0][0] == len(result.applied)
        store.execute("CREATE TABLE rt (n UInt32, s String) ENGINE = MergeTree ORDER BY n")
        assert store.insert_columns("rt", {"n": np.array([1, 2], dtype=np.uint32), "s": ["a", "b"]}) == 2
        codes = np.array([0, 1, 1], dtype=np.int64)
        store.bulk_insert("rt", {"n": np.array([3, 4, 5], dtype=np.uint32), "s": StrColumn(codes, ["c", "d"])}, 3)
        assert "not possible" not in caplog.text  # the Native insert itself went over TLS
        rows = store.query_rows("SELECT n, s FROM rt ORDER BY n")
        assert rows == [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "d")]
        assert list(store.query_df("SELECT n FROM rt ORDER BY n")["n"]) == [1, 2, 3, 4, 5]
        assert tls_ch.password not in repr(store.url) + store.url.redacted()
    finally:
        store.drop_database()  # type: ignore[attr-defined]
        store.close()


def run_cli(*args: str) -> tuple[int, str]:
    """`dyncc ARGS` in a subprocess: exit status and stdout + stderr."""
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from dyncc.cli import main; sys.exit(main())", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
    )
    return proc.returncode, proc.stdout + proc.stderr


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """`dyncc ARGV` in this process must exit 2 with one line on stderr (returned) and no stdout."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    return err


def test_schema_apply_over_tls(tls_ch: TlsClickHouse) -> None:
    url = tls_ch.url(unique_name("tls"))
    status, out = run_cli("schema", "apply", "--clickhouse", url)
    try:
        assert status == 0, out
        assert "secure=1" in out and "applied" in out
        assert tls_ch.password not in out
    finally:
        store = open_store(url)
        store.drop_database()  # type: ignore[attr-defined]
        store.close()


def test_wrong_password_is_one_line_exit_2(tls_ch: TlsClickHouse, secret_file: Path) -> None:
    status, out = run_cli("schema", "apply", "--clickhouse", tls_ch.url("x", password_file=secret_file))
    assert status == 2
    assert out.strip().splitlines() == ["dyncc schema: ClickHouse error 193: Wrong password for user default."]
    assert SECRET not in out and tls_ch.password not in out


def test_untrusted_ca_is_one_line(tls_ch: TlsClickHouse, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # certifi's bundle (no ca_certs=)
    err = one_line_error(capsys, ["schema", "apply", "--clickhouse", tls_ch.url("x", ca_certs="")])
    assert "certificate is not trusted" in err and "ca_certs=FILE" in err
    # another CA than the one that signed the server's certificate
    other = tmp_path / "other"
    subprocess.run(["bash", str(DEPLOY / "clickhouse" / "tls-certs.sh"), str(other)], check=True, capture_output=True)
    err = one_line_error(capsys, ["schema", "apply", "--clickhouse", tls_ch.url("x", ca_certs=str(other / "ca.crt"))])
    assert "certificate is not trusted" in err and f"ca_certs={other / 'ca.crt'}" in err
    assert tls_ch.password not in err


def test_plaintext_client_to_tls_port_and_back(tls_ch: TlsClickHouse, capsys: pytest.CaptureFixture[str]) -> None:
    plain = tls_ch.url("x", secure="", ca_certs="")
    err = one_line_error(capsys, ["schema", "status", "--clickhouse", plain])
    assert "127.0.0.1:19623 unreachable" in err and "add secure=1" in err
    err = one_line_error(capsys, ["schema", "status", "--clickhouse", tls_ch.url("x", port=TCP_PORT)])
    assert "the port does not speak TLS" in err
    assert tls_ch.password not in err
