"""How `dyncc demo` ends (dyncc/lab/closing.py, dyncc/lab/demo.py `finish`): the per-class
summary with its rollbacks, the report, then the store's URL and commands that open it, after
every log line; and those commands work on the store as printed."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from dyncc.lab.closing import closing_lines, store_lines
from dyncc.lab.run import LabSummary
from tests.support import demo_closing

REPO = Path(__file__).resolve().parents[3]
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def test_store_lines_name_the_url_with_its_database_and_quote_it() -> None:
    url = "chdb:///tmp/dyncc demo/chdb?database=dyncc_demo"
    lines = store_lines(url, ("lab-a", "198.51.100.0/24"), dyncc="dyncc")
    assert lines[0] == f"store: {url}"
    explain = shlex.split(lines[1].split(": ", 1)[1])
    assert explain == [
        *("dyncc", "control", "--clickhouse", url, "explain"),
        *("--pop", "lab-a", "--prefix", "198.51.100.0/24"),
    ]
    assert shlex.split(lines[2].split(": ", 1)[1])[:4] == ["dyncc", "report", "--clickhouse", url]
    sql = shlex.split(lines[3].split(": ", 1)[1])
    assert (
        sql[:2] == [sys.executable, "-c"] and '"/tmp/dyncc demo/chdb"' in sql[2] and "dyncc_demo.selections" in sql[2]
    )
    # a server: the password is not printed, clickhouse-client asks for it
    server = store_lines("clickhouse://ops:s3cret@ch1:9000/dyncc?cluster=edge", None, dyncc="dyncc")
    assert server[0] == "store: clickhouse://ops:PASSWORD@ch1:9000/dyncc?cluster=edge"
    assert all("s3cret" not in line for line in server)
    assert "--pop POP --prefix PREFIX" in server[1]
    assert "clickhouse-client --host ch1 --port 9000 --user ops --password --database dyncc" in server[3]


def test_the_summary_says_when_a_wave_was_rolled_back() -> None:
    rolled = "rolled back lab-a v3 (round 9): canary wave v3 regressed: p10 -62%; v4 re-published the stable entries"
    text = LabSummary("run", rollbacks=[rolled]).summary_text()
    assert rolled in text.splitlines()
    assert "rollbacks: none" in LabSummary("run", rollbacks=[]).summary_text()
    assert "rollback" not in LabSummary("run").summary_text()  # the store was not read: nothing claimed
    lines = closing_lines(
        LabSummary("run", example=("lab-a", "2001:db8::/56")), "report x", Path("/r.html"), "chdb:///s"
    )
    assert lines[:2] == ["", LabSummary("run").summary_text()]
    assert lines[2:4] == ["report x", "report: /r.html"]
    assert lines[4] == "store: chdb:///s" and "--pop lab-a --prefix 2001:db8::/56" in lines[5]


def dyncc_argv(printed: str) -> list[str]:
    """A printed command line, with its dyncc (a path or `dyncc`) run as `python -m dyncc.cli`."""
    argv = shlex.split(printed)
    if argv[0].endswith("dyncc"):
        return [sys.executable, "-m", "dyncc.cli", *argv[1:]]
    assert argv[:3] == [sys.executable, "-m", "dyncc.cli"], argv
    return argv


def command(out: str, label: str) -> str:
    m = re.search(rf"^  {re.escape(label)}: (.+)$", out, re.M)
    assert m, f"no '{label}' line in:\n{out}"
    return m.group(1)


@pytest.mark.slow
def test_a_run_ends_with_the_summary_and_store_urls_that_open(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout block-buffered, as piped
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.demo_closing", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, as a terminal shows it
        text=True,
        cwd=REPO,
        env=env,
        timeout=600,
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:]
    lines = out.splitlines()
    heads = [i + 1 for i in range(len(lines) - 1) if not lines[i] and lines[i + 1].startswith("synthetic demo run: ")]
    assert len(heads) == 1, out[-4000:]
    start = heads[0]
    # every log line (the teardown's, the report writer's) comes before the summary
    assert any("teardown 2:" in line for line in lines[:start]), out[-4000:]
    assert any(LOG_LINE.match(line) and "dyncc-demo-report.html" in line for line in lines[:start]), out[-4000:]
    closing = lines[start:]
    assert not [line for line in closing if LOG_LINE.match(line)], out[-4000:]
    # the summary, the rollback, then the report and the store, last
    text = "\n".join(closing)
    assert re.search(r"^lossy +\d+ +[1-9]", text, re.M), text
    rolled = f"rolled back {demo_closing.ROLLBACK_POP} v3 (round {demo_closing.ROLLBACK_ROUND}): "
    assert rolled + demo_closing.ROLLBACK_REASON in text, text
    report = tmp_path / "dyncc-demo-report.html"
    assert f"report: {report}" in closing and report.stat().st_size > 10_000
    url = f"chdb://{tmp_path / 'chdb'}?database={demo_closing.DATABASE}"
    assert closing[-4] == f"store: {url}", text

    # the printed commands open the store (the demo's process is gone: chDB has one user at a time)
    explain_argv = dyncc_argv(command(out, "explain a prefix"))
    pop, prefix = explain_argv[explain_argv.index("--pop") + 1], explain_argv[explain_argv.index("--prefix") + 1]
    assert (pop, prefix) != ("POP", "PREFIX"), "the closing lines name no prefix of the run"
    explained = subprocess.run(explain_argv, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert explained.returncode == 0, explained.stderr[-3000:]
    assert f"prefix {prefix} at POP {pop}" in explained.stdout
    assert "trials (" in explained.stdout, explained.stdout  # the prefix's trial, from the same store

    reported = subprocess.run(
        dyncc_argv(command(out, "the report again")), capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert reported.returncode == 0, reported.stderr[-3000:]
    again = tmp_path / "dyncc-report.html"
    assert again.stat().st_size > 10_000 and "<svg" in again.read_text()

    queried = subprocess.run(
        shlex.split(command(out, "SQL (chDB, one process at a time)")),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert queried.returncode == 0, queried.stderr[-3000:]
    assert re.search(r"\b(lax|ord)\b.*\btrial\b", queried.stdout), queried.stdout
