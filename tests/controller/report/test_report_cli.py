"""`dyncc report` refuses, in one line and exit 2 before any work, what it cannot do (issue 33
item 7): a database that does not exist (on the real ClickHouse server and in chDB; it is not
created), a --since in the future or not before --until, and an --output it could not replace
(a file another user owns in a sticky directory, a read-only file), checked before the store is
opened."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.report.cli import resolve_window
from controller.store import ClickHouseStore, open_store, parse_store_url
from controller.store.chdb import ChdbStore
from dyncc.cli import main
from dyncc_common.errors import ConfigError

#: a server that never answers: a refusal that comes before the store is opened names the option
NO_SERVER = "clickhouse://default:@127.0.0.1:1/default"


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dyncc report:"), err
    return lines[0]


def test_a_missing_database_on_the_server_is_refused_not_created(clickhouse_db_url: str, tmp_path, capsys) -> None:
    out = tmp_path / "r.html"
    assert main(["report", "--clickhouse", clickhouse_db_url, "-o", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    database = parse_store_url(clickhouse_db_url).database
    assert f"no database {database} on the server" in line and "schema apply" in line, line
    store = ClickHouseStore(parse_store_url(clickhouse_db_url))
    try:
        assert not store.database_exists()
        store.ensure_database()  # the check itself: it sees a database that exists
        assert store.database_exists()
    finally:
        store.close()
    assert not out.exists()


def test_a_missing_chdb_database_is_refused_not_created(chdb_url: str, tmp_path, capsys) -> None:
    out = tmp_path / "r.html"
    open_store(chdb_url).close()  # the directory exists (another database in it)
    url = chdb_url.replace("?database=", "?database=x")
    assert main(["report", "--clickhouse", url, "-o", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    database = parse_store_url(url).database
    assert f"no database {database} in the chDB store" in line, line
    store = ChdbStore(parse_store_url(url), create=False)
    try:
        assert not store.database_exists()
        assert ChdbStore(parse_store_url(chdb_url), create=False).database_exists()
    finally:
        store.close()
    assert not out.exists()


def test_a_window_that_runs_backwards_is_refused(tmp_path, capsys) -> None:
    now = dt.datetime(2026, 5, 1, 12, 0)
    assert resolve_window("2026-05-01T11:00", None, now)[0] == dt.datetime(2026, 5, 1, 11, 0)
    assert resolve_window("2026-05-01T12:00", None, now)[0] == now
    with pytest.raises(ConfigError, match="in the future"):
        resolve_window("2026-05-01T12:01", None, now)
    with pytest.raises(ConfigError, match="not before --until"):
        resolve_window("2026-05-01T10:00", "2026-05-01T09:00", now)
    out = tmp_path / "r.html"
    future = (dt.datetime.now(dt.UTC) + dt.timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    assert main(["report", "--clickhouse", NO_SERVER, "--since", future, "-o", str(out)]) == 2
    assert "--since" in _one_line(capsys.readouterr().err) and not out.exists()


@pytest.fixture
def sticky() -> Iterator[Path]:
    """A world-writable sticky directory (like /tmp) holding root's r.html and nobody's ro.html (0444)."""
    path = Path(tempfile.mkdtemp(prefix="dyncc-sticky-"))
    os.chmod(path, 0o1777)
    (path / "r.html").write_text("root's")
    (path / "ro.html").write_text("nobody's")
    os.chown(path / "ro.html", 65534, 65534)
    os.chmod(path / "ro.html", 0o444)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to the nobody user")
@pytest.mark.parametrize(
    ("name", "reason"),
    [("r.html", "the file exists and is not writable"), ("ro.html", "the file exists and is not writable")],
)
def test_an_output_that_could_not_be_replaced_is_refused_first(sticky: Path, name: str, reason: str) -> None:
    """Before: the report was built (21 s on a day of data) and the final rename failed."""
    before = (sticky / name).read_text()
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m", "dyncc.cli"]
    proc = subprocess.run(
        [*cmd, "report", "--clickhouse", NO_SERVER, "-o", str(sticky / name)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": "/tmp"},
        cwd="/tmp",
    )
    # the server at port 1 was never asked: the output was checked first
    assert (proc.returncode, proc.stderr.strip()) == (
        2,
        f"dyncc report: cannot write --output {sticky / name}: {reason}",
    )
    assert (sticky / name).read_text() == before
    assert sorted(p.name for p in sticky.iterdir()) == ["r.html", "ro.html"]  # no probe file left


def test_a_writable_output_passes_the_check_and_leaves_nothing(tmp_path) -> None:
    from controller.report.cli import check_output

    check_output(str(tmp_path / "sub" / "r.html"))
    assert [p.name for p in tmp_path.iterdir()] == ["sub"] and not any((tmp_path / "sub").iterdir())
