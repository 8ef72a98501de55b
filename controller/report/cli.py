"""`dyncc report`: write the self-contained HTML report for a store (see controller/report/).

Every option is checked before the store is opened (a bad time, a --since in the future or
not before --until, bucket, POP name, an unreadable --asn-file or an unwritable --output is
one line, exit 2); a --pop the store does
not know (no telemetry, no published config) is exit 2 naming the known POPs.  The report only
reads the store: a chdb:// directory or a database (the URL's path, chDB's ?database=) that
does not exist, or a store without the tables it reads (REPORT_TABLES), is one line and exit
2 (never a new empty store or database).  The flags come
from ReportSettings (controller/report/settings.py); dyncc/cli.py calls run(settings).
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from pathlib import Path

from controller.report.settings import ReportSettings
from dyncc_common.errors import ConfigError
from dyncc_common.units import parse_duration

__all__ = ["REPORT_TABLES", "SETTINGS", "check_output", "parse_time", "resolve_window", "run"]


SETTINGS = ReportSettings
#: the tables the report reads (http_requests and round_settings are optional: it says what it
#: did without them)
REPORT_TABLES = ("tcpinfo", "tcpinfo_5m", "selections", "round_outcomes", "config_versions", "trial_rounds")


def parse_time(text: str, what: str) -> dt.datetime:
    """ISO 8601 time -> naive UTC; raises ConfigError with a one-line reason."""
    try:
        value = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(f"bad {what} {text!r}: use an ISO time like 2024-05-01T10:00 (UTC)") from exc
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def resolve_window(
    since: str | None, until: str | None, now: dt.datetime | None = None
) -> tuple[dt.datetime | None, dt.datetime | None, float | None]:
    """(since, until, span seconds) from the flags; a duration --since is relative to --until.

    A window that would run backwards is a ConfigError: --since after `now` (naive UTC; the
    clock when not given) or not before --until."""
    end = parse_time(until, "--until") if until else None
    if since is None:
        return None, end, None
    if since.strip()[:1].isdigit() and "-" not in since and ":" not in since:
        return None, end, parse_duration(since, "--since")
    start = parse_time(since, "--since")
    if end is not None and start >= end:
        raise ConfigError(f"--since {since} is not before --until {until}")
    now = now or dt.datetime.now(dt.UTC).replace(tzinfo=None)
    if start > now:
        raise ConfigError(f"--since {since} is in the future (now {now:%Y-%m-%dT%H:%M:%S} UTC)")
    return start, end, None


def check_output(path: str) -> None:
    """ConfigError unless the report can be written at `path` (its directory is created).

    Checked before any work: the directory takes a new file (one is made and removed: a
    read-only file system or an immutable directory too), and an existing file there is one
    this user may write (a read-only report, or another user's in a sticky directory like
    /tmp, which the final rename could not replace)."""
    out = Path(path)
    try:  # is_dir() raises, not False, where a directory on the way may not be searched (EACCES)
        if not path or out.is_dir():
            raise ConfigError(f"bad --output {path!r}: give a file name")
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot write --output {path}: {exc.strerror or exc}") from exc
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write --output {path}: directory not writable")
    if out.exists() and not os.access(out, os.W_OK):
        raise ConfigError(f"cannot write --output {path}: the file exists and is not writable")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".probe", dir=out.parent)
    except OSError as exc:
        raise ConfigError(f"cannot write --output {path}: {exc.strerror or exc}") from exc
    os.close(fd)
    os.unlink(probe)


def run(settings: ReportSettings) -> int:
    from controller.report import data as report_data
    from controller.report import write_report
    from controller.report.asn import load_asn_file
    from controller.store import open_store
    from dyncc_common.runtime import setup_logging

    setup_logging(settings.verbose)
    since, until, span = resolve_window(settings.since, settings.until)
    bucket = None
    if settings.bucket:
        bucket = int(parse_duration(settings.bucket, "--bucket"))
        if not 1 <= bucket <= 86400:
            raise ConfigError(f"bad --bucket {settings.bucket!r}: between 1s and 1d")
    check_output(settings.output)
    asn_table = None
    if settings.asn_file:
        try:
            asn_table = load_asn_file(settings.asn_file)
        except OSError as exc:
            raise ConfigError(f"cannot read --asn-file {settings.asn_file}: {exc.strerror or exc}") from exc
        if asn_table.entries == 0:
            raise ConfigError(f"--asn-file {settings.asn_file} has no prefix,asn[,name] line")
    store = open_store(settings.clickhouse, existing=True)
    try:
        for table in REPORT_TABLES:
            if not store.table_exists(table):
                raise ConfigError(f"table {table} missing in {store.url.redacted()}: run 'dyncc schema apply' first")
        if settings.pop:
            from controller.store.pops import require_known_pops

            require_known_pops(store, [settings.pop])
        if span is not None:
            window = report_data.default_window(report_data.data_span(store, settings.pop), None, until)
            if window is not None:
                since, until = window.end - dt.timedelta(seconds=span), window.end
        try:
            summary = write_report(
                store,
                settings.output,
                pop=settings.pop,
                since=since,
                until=until,
                title=settings.title,
                asn_table=asn_table,
                bucket_seconds=bucket,
            )
        except OSError as exc:
            raise ConfigError(f"cannot write {settings.output}: {exc.strerror or exc}") from exc
    finally:
        store.close()
    print(summary.line())
    return 0
