"""The lines `dyncc demo` ends with: the per-class summary, the report, and the store with the
commands that open it.

`closing_lines()` builds them (pure, but for finding the `dyncc` command): the summary (with
its rollbacks, and the effect model's headline the report shows), the report's line and path,
then the store's URL (`chdb:///dir?database=db`, or the `clickhouse://` URL of a server) and
three commands that open it as they are printed: `dyncc control explain` for a prefix of the run,
`dyncc report`, and an SQL query.  `print_closing()` prints them last: the caller has torn the
lab down and written the report, and the log handlers (stderr) are flushed first, so no log line
lands after the summary (the lines go to stdout).
"""

from __future__ import annotations

import json
import logging
import shlex
import shutil
import sys
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from controller.store.url import parse_store_url

if TYPE_CHECKING:
    from dyncc.lab.run import LabSummary

SQL_EXAMPLE = (
    "SELECT pop, decision, count() AS prefixes FROM {db}.selections GROUP BY pop, decision ORDER BY pop, decision"
)


def dyncc_command() -> str:
    """How a shell runs this dyncc: `dyncc` when PATH finds this one, else its full path."""
    script = Path(sys.executable).with_name("dyncc")
    if not script.exists():
        return f"{shlex.quote(sys.executable)} -m dyncc.cli"
    found = shutil.which("dyncc")
    if found and Path(found).resolve() == script.resolve():
        return "dyncc"
    return shlex.quote(str(script))


def shown_url(url: str) -> str:
    """The URL to print: a server's password replaced by PASSWORD."""
    parts = urllib.parse.urlsplit(url)
    if not parts.password:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username or ''}:PASSWORD@{host}"))


def store_lines(url: str, example: tuple[str, str] | None, dyncc: str | None = None, at: str = "") -> list[str]:
    """The store's URL and the commands that open it (explain `example`, a (POP, prefix), at
    `at`: a lab's window is minutes long, so explain looks at the run's last round)."""
    parsed = parse_store_url(url)
    shown = shown_url(url)
    quoted = shlex.quote(shown)
    dyncc = dyncc or dyncc_command()
    pop, prefix = example or ("POP", "PREFIX")
    sql = SQL_EXAMPLE.format(db=parsed.database)
    if parsed.scheme == "chdb":
        query = f"query({json.dumps(sql)}, {json.dumps('PrettyCompact')})"
        code = f"from chdb import session; print(session.Session({json.dumps(parsed.path)}).{query})"
        sql_line = f"  SQL (chDB, one process at a time): {shlex.quote(sys.executable)} -c {shlex.quote(code)}"
    else:
        user = f" --user {shlex.quote(parsed.user)}" if parsed.user else ""
        password = " --password" if parsed.password else ""
        sql_line = (
            f"  SQL: clickhouse-client --host {parsed.host} --port {parsed.port}{user}{password} "
            f"--database {parsed.database} --query {shlex.quote(sql)}"
        )
    return [
        f"store: {shown}",
        f"  explain a prefix: {dyncc} control --clickhouse {quoted} explain --pop {pop} --prefix {prefix}"
        + (f" --at {at}" if at else ""),
        f"  the report again: {dyncc} report --clickhouse {quoted} --output dyncc-report.html",
        sql_line,
    ]


def closing_lines(
    summary: LabSummary, report_line: str, report_path: Path, store_url: str, note: str = ""
) -> list[str]:
    """The summary, the report's line and path, the store and how to open it."""
    return [
        "",
        summary.summary_text(),
        report_line,
        f"report: {report_path}" + (f" {note}" if note else ""),
        *store_lines(store_url, summary.example, at=summary.example_at),
    ]


def print_closing(lines: Sequence[str], out: TextIO | None = None) -> None:
    """Flush what was printed and logged so far, then print `lines`: nothing logged before comes
    after them."""
    out = out or sys.stdout
    out.flush()
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    print("\n".join(lines), file=out, flush=True)
