"""Load an nginx access log into http_requests, at least once and never twice: AccessLogLoader.

    loader = AccessLogLoader(store, pop="fra1", host="edge-1")
    result = loader.load("/var/log/nginx/access.log")   # LoadResult: rows, duplicates, dead letters
    ...                                                 # call again: only what is new is read

One loader serves one (pop, host) and may follow several files.  Each load(path):
  * identifies the log at `path` by its first line (access_log.log_id_of): a log renamed by
    rotation is still the same log, a new file or a truncated one is a new log (from offset 0);
  * returns at once when the file did not change since the last call (no store query);
  * otherwise asks the store how far this log is done: http_log_progress (every line before
    end_offset is loaded or dead-lettered) and, per shard, the http_log_ledger (the highest
    line offset loaded there, written by a materialized view in the same INSERT as the rows);
  * reads complete lines from there in chunks of at most `chunk_lines` lines and
    `chunk_bytes` bytes (a partial last line waits until its newline is written);
  * per chunk: dead-letters the bad lines (ingest_dead_letter: the reason, and where: the log,
    its path and the byte offset), inserts the good ones in one columnar INSERT per shard,
    skipping lines the shard's ledger already covers, then records the chunk's end in
    http_log_progress.
A crash anywhere, a retry after a lost connection, a re-run or the same lines loaded by a
second loader object never duplicate rows: the ledger says which lines landed with the rows
themselves.  Rows the store refuses (StoreContentError) are inserted again in halves down to
the single lines refused, which are dead-lettered with the store's reason.  StoreUnavailable
and other store errors propagate: call load() again (the loader asks the store again first).

A file replaced at its path (rotation: renamed and created anew) is kept open and drained
on later calls until it stops growing, so lines nginx writes to it before it reopens its
log are loaded too; a trailing line without a newline in such a file is dead-lettered when
it is let go.  Two loaders on the same log at the same time are not supported.
docs/ingest.md ("Access logs") has the design.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controller.ingest.access_log import MAX_LINE_BYTES, AccessRecord, LineError, log_id_of, parse_line
from controller.ingest.metrics import AccessLogMetrics
from controller.ingest.shards import row_shards, take_rows
from controller.store import Store, StoreContentError
from controller.store.columns import Prepared, StrColumn
from controller.store.sql import query

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "DEFAULT_CHUNK_LINES",
    "MIN_CHUNK_BYTES",
    "AccessLogLoader",
    "LoadResult",
    "dead_letter_topic",
]

log = logging.getLogger("dyncc.access_log")

TABLE = "http_requests"
DEFAULT_CHUNK_LINES = 50_000
DEFAULT_CHUNK_BYTES = 8 << 20
#: a chunk must hold the longest line and its newline
MIN_CHUNK_BYTES = MAX_LINE_BYTES + 1
_SCAN_BYTES = 1 << 20  # read size when looking for the end of an over-long line


@dataclass
class LoadResult:
    """What one load() (or a sum of them) did."""

    lines: int = 0  # complete lines read (loaded, dead-lettered or already in the store)
    rows: int = 0  # rows inserted into http_requests
    duplicates: int = 0  # lines the store already had (skipped)
    dead_letters: int = 0  # bad lines sent to ingest_dead_letter
    bytes: int = 0  # bytes of the complete lines read
    chunks: int = 0
    new_logs: int = 0  # logs met for the first time at a path (first call, rotation, truncation)
    behind: int = 0  # bytes at the path(s) not loaded yet: a partial last line
    seconds: float = 0.0

    def add(self, other: LoadResult) -> None:
        for name in ("lines", "rows", "duplicates", "dead_letters", "bytes", "chunks", "new_logs", "behind"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.seconds += other.seconds

    def summary(self) -> str:
        return (
            f"{self.lines} lines: {self.rows} rows, {self.duplicates} already loaded, "
            f"{self.dead_letters} dead letters; {self.bytes} bytes in {self.chunks} chunks, "
            f"{self.new_logs} new logs, {self.behind} bytes waiting; {self.seconds * 1000:.0f} ms"
        )


@dataclass
class _Log:
    """One open log file at a path."""

    path: str
    fd: int
    dev: int
    ino: int
    log_id: int | None = None  # None until the first line is complete
    position: int = 0  # every line before this offset is loaded or dead-lettered
    loaded: list[int] = field(default_factory=list)  # per shard: highest offset in its ledger (-1: none)
    synced: bool = False  # position and loaded were read from the store during this call
    seen_size: int = -1  # the file's size when last looked at
    idle: bool = False  # replaced at its path and seen unchanged once since

    def close(self) -> None:
        os.close(self.fd)


@dataclass
class _Chunk:
    start: int
    end: int  # offset after the chunk's last line
    lines: int = 0
    records: list[AccessRecord] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    raws: list[bytes] = field(default_factory=list)  # the good lines (dead-lettered if the store refuses them)
    dead: list[tuple[int, bytes, str]] = field(default_factory=list)  # (offset, line, reason)


def dead_letter_topic(pop: str, host: str, log_id: int, path: str) -> str:
    """The `topic` of an access-log line's dead letter (its `offset` is the line's byte offset)."""
    return f"access-log:{pop}/{host}:{log_id:016x}:{path}"


class AccessLogLoader:
    """Incremental, deduplicated loader of one (pop, host)'s access logs (module docstring)."""

    def __init__(
        self,
        store: Store,
        *,
        pop: str,
        host: str,
        v4_len: int = 24,
        v6_len: int = 56,
        chunk_lines: int = DEFAULT_CHUNK_LINES,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        metrics: AccessLogMetrics | None = None,
        after_insert: Callable[[], None] | None = None,
    ) -> None:
        if chunk_lines < 1:
            raise ValueError("chunk_lines must be at least 1")
        if chunk_bytes < MIN_CHUNK_BYTES:
            raise ValueError(f"chunk_bytes must be at least {MIN_CHUNK_BYTES} (the longest line and its newline)")
        self.store = store
        self.pop = pop
        self.host = host
        self.v4_len = v4_len
        self.v6_len = v6_len
        self.chunk_lines = chunk_lines
        self.chunk_bytes = chunk_bytes
        self.metrics = metrics or AccessLogMetrics()
        #: fault injection for tests: runs after a chunk's rows landed, before its progress record
        self.after_insert = after_insert
        self._current: dict[str, _Log] = {}
        self._retired: dict[str, list[_Log]] = {}

    # ------------------------------------------------------------ public

    def load(self, path: str | os.PathLike[str], stop: Callable[[], bool] | None = None) -> LoadResult:
        """Load what is new in the log at `path` (and in logs rotated away from it); StoreError on failure.

        `stop()` is asked between chunks: when it returns True the call returns early (what is
        loaded stays loaded).  A missing file is not an error: there is nothing to load yet.
        """
        t0 = time.monotonic()
        key = os.fspath(path)
        result = LoadResult()
        for old in list(self._retired.get(key, ())):
            self._drain_retired(key, old, result, stop)
        current = self._current.get(key)
        try:
            st = os.stat(key)
        except FileNotFoundError:
            st = None
        if current is not None and (st is None or (current.dev, current.ino) != (st.st_dev, st.st_ino)):
            del self._current[key]
            self._retired.setdefault(key, []).append(current)
            log.info("%s was replaced; reading the old file until it stops growing", key)
            self._drain_retired(key, current, result, stop)
            current = None
        if st is not None and current is None:
            current = self._open(key)
        if current is not None:
            self._advance(current, result, stop)
            size = os.fstat(current.fd).st_size
            result.behind += max(size - current.position, 0)
        self.metrics.behind.labels(file=key).set(result.behind)
        result.seconds = time.monotonic() - t0
        return result

    def close(self) -> None:
        """Close every file held (a later load() opens them again)."""
        for lg in self._current.values():
            lg.close()
        for logs in self._retired.values():
            for lg in logs:
                lg.close()
        self._current.clear()
        self._retired.clear()

    def __enter__(self) -> AccessLogLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ files

    def _open(self, key: str) -> _Log | None:
        try:
            fd = os.open(key, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        st = os.fstat(fd)
        lg = _Log(key, fd, st.st_dev, st.st_ino)
        self._current[key] = lg
        return lg

    def _drain_retired(self, key: str, lg: _Log, result: LoadResult, stop: Callable[[], bool] | None) -> None:
        """Load what a replaced file gained; let it go once it did not grow between two calls
        (its last line dead-lettered if it has no newline)."""
        size = os.fstat(lg.fd).st_size
        if size == lg.seen_size and (lg.synced or lg.log_id is None):
            if not lg.idle:
                lg.idle = True  # unchanged once: nginx may not have reopened its log yet
                return
            if size > lg.position and lg.log_id is not None:
                self._dead_letter_tail(lg, size, result)
            self._retired[key].remove(lg)
            lg.close()
            return
        lg.idle = False
        self._advance(lg, result, stop)

    def _dead_letter_tail(self, lg: _Log, size: int, result: LoadResult) -> None:
        assert lg.log_id is not None
        raw = os.pread(lg.fd, MAX_LINE_BYTES, lg.position)
        reason = f"incomplete last line ({size - lg.position} bytes, no newline) of a log replaced at its path"
        self._insert_dead_letters(lg, [(lg.position, raw, reason)])
        self._record_progress(lg, size)
        result.dead_letters += 1
        self.metrics.dead_letters.inc()
        log.warning("dead letter %s@%d: %s", lg.path, lg.position, reason)
        lg.position = size

    def _first_line(self, fd: int) -> bytes | None:
        """The file's first line with its newline (its first bytes if over-long), or None if not complete."""
        head = os.pread(fd, MAX_LINE_BYTES + 1, 0)
        nl = head.find(b"\n")
        if nl >= 0:
            return head[: nl + 1]
        return head if len(head) > MAX_LINE_BYTES else None

    # ------------------------------------------------------------ one log

    def _advance(self, lg: _Log, result: LoadResult, stop: Callable[[], bool] | None) -> None:
        size = os.fstat(lg.fd).st_size
        if lg.log_id is not None:
            if size == lg.seen_size and lg.synced:
                return  # nothing new since the last call
            shrank = 0 <= size < lg.seen_size
            first = self._first_line(lg.fd)
            if shrank or first is None or log_id_of(first) != lg.log_id:  # truncated or rewritten: a new log
                log.info("%s: log %016x was truncated or rewritten; a new log starts", lg.path, lg.log_id)
                lg.log_id = None
        if lg.log_id is None:
            first = self._first_line(lg.fd)
            if first is None:
                lg.seen_size = size
                return  # no complete first line yet
            lg.log_id = log_id_of(first)
            lg.position = 0
            result.new_logs += 1
            self.metrics.logs.inc()
        lg.synced = False
        caught_up = False
        try:
            self._sync(lg, size)
            while stop is None or not stop():
                chunk = self._read_chunk(lg)
                if chunk is None:
                    caught_up = True
                    break
                self._load_chunk(lg, chunk, result)
        except BaseException:
            lg.synced = False  # ask the store again next time
            raise
        lg.seen_size = size if caught_up else -1  # stopped early: the rest is new next time

    def _sync(self, lg: _Log, size: int) -> None:
        """Where to go on from, per the store: the progress record and every shard's ledger."""
        params = {"pop": self.pop, "host": self.host, "log_id": lg.log_id}
        loaded = []
        for shard in self.store.shard_stores():
            inserts, last = shard.query_rows(query("ingest_access_ledger"), params)[0]
            loaded.append(int(last) if int(inserts) else -1)
        records, end = self.store.query_rows(query("ingest_access_progress"), params)[0]
        done = int(end) if int(records) else 0
        lg.loaded = loaded
        lg.position = max(done, min(loaded))  # a ledger offset starts a line: it is read again, and skipped
        lg.position = max(lg.position, 0)
        if lg.position > size:
            log.warning(
                "%s: the store has log %016x up to byte %d, the file holds %d bytes", lg.path, lg.log_id, done, size
            )
        lg.synced = True

    def _read_chunk(self, lg: _Log) -> _Chunk | None:
        """The next complete lines from lg.position, parsed; None when there is none yet."""
        pos = lg.position
        buf = os.pread(lg.fd, self.chunk_bytes, pos)
        if not buf:
            return None
        last = buf.rfind(b"\n")
        if last < 0:
            if len(buf) <= MAX_LINE_BYTES:
                return None  # a partial line: loaded once its newline is written
            nl = self._find_newline(lg.fd, pos + len(buf))
            if nl is None:
                return None
            reason = f"line is {nl - pos} bytes, over the {MAX_LINE_BYTES}-byte limit"
            return _Chunk(pos, nl + 1, lines=1, dead=[(pos, buf[:MAX_LINE_BYTES], reason)])
        lines = buf[:last].split(b"\n")
        if len(lines) > self.chunk_lines:
            del lines[self.chunk_lines :]
            end = pos + sum(map(len, lines)) + len(lines)
        else:
            end = pos + last + 1
        chunk = _Chunk(pos, end, lines=len(lines))
        off = pos
        v4, v6 = self.v4_len, self.v6_len
        for line in lines:
            try:
                chunk.records.append(parse_line(line, v4, v6))
                chunk.offsets.append(off)
                chunk.raws.append(line)
            except LineError as exc:
                chunk.dead.append((off, line[:MAX_LINE_BYTES], str(exc)))
            off += len(line) + 1
        return chunk

    @staticmethod
    def _find_newline(fd: int, start: int) -> int | None:
        """The offset of the first newline at or after `start`, or None (end of file first)."""
        pos = start
        while True:
            piece = os.pread(fd, _SCAN_BYTES, pos)
            if not piece:
                return None
            nl = piece.find(b"\n")
            if nl >= 0:
                return pos + nl
            pos += len(piece)

    def _load_chunk(self, lg: _Log, chunk: _Chunk, result: LoadResult) -> None:
        """Dead letters, then the rows (per shard, minus what its ledger has), then the progress record."""
        if chunk.dead:
            self._insert_dead_letters(lg, chunk.dead)
        rows = duplicates = 0
        refused: list[tuple[int, bytes, str]] = []
        if chunk.records:
            offsets = np.array(chunk.offsets, dtype=np.uint64)
            columns = self._columns(lg, chunk.records, offsets)
            shards = self.store.shard_stores()
            if len(shards) == 1:
                row_shard = np.zeros(len(offsets), dtype=np.int64)
            else:
                row_shard = row_shards(columns, self.store.shard_weights())
            loaded = np.array(lg.loaded, dtype=np.int64)
            new = offsets.astype(np.int64) > loaded[row_shard]
            duplicates = int((~new).sum())
            for index, shard in enumerate(shards):
                idx = np.flatnonzero(new & (row_shard == index))
                if idx.size == 0:
                    continue
                rows += self._land(lg, shard, columns, idx, chunk, refused)
                lg.loaded[index] = int(offsets[idx[-1]])
        if self.after_insert is not None:
            self.after_insert()
        self._record_progress(lg, chunk.end)
        lg.position = chunk.end
        dead = len(chunk.dead) + len(refused)
        result.lines += chunk.lines
        result.rows += rows
        result.duplicates += duplicates
        result.dead_letters += dead
        result.bytes += chunk.end - chunk.start
        result.chunks += 1
        m = self.metrics
        m.lines.inc(chunk.lines)
        m.rows.inc(rows)
        m.duplicates.inc(duplicates)
        m.dead_letters.inc(dead)
        m.bytes.inc(chunk.end - chunk.start)
        for off, _, reason in [*chunk.dead, *refused][:20]:
            log.warning("dead letter %s@%d: %s", lg.path, off, reason)
        if dead > 20:
            log.warning("%s: %d more dead letters in this chunk", lg.path, dead - 20)

    def _land(
        self,
        lg: _Log,
        shard: Store,
        columns: Prepared,
        idx: np.ndarray,
        chunk: _Chunk,
        refused: list[tuple[int, bytes, str]],
        top: bool = True,
    ) -> int:
        """Insert rows `idx` (ascending) into `shard`; returns the rows landed.

        Rows the store refuses are inserted again in halves (in offset order, so the ledger
        keeps covering a prefix of the shard's lines) down to the single rows it refuses,
        which are dead-lettered at once with its reason.
        """
        try:
            shard.bulk_insert(TABLE, take_rows(columns, idx), int(idx.size))
            return int(idx.size)
        except StoreContentError as exc:
            if idx.size == 1:
                i = int(idx[0])
                dead = (chunk.offsets[i], chunk.raws[i], f"refused by the store: {exc}")
                self._insert_dead_letters(lg, [dead])
                refused.append(dead)
                return 0
            if top:
                log.warning("the store refused %d rows of %s (%s); loading them in halves", idx.size, lg.path, exc)
        mid = int(idx.size) // 2
        landed = self._land(lg, shard, columns, idx[:mid], chunk, refused, top=False)
        return landed + self._land(lg, shard, columns, idx[mid:], chunk, refused, top=False)

    # ------------------------------------------------------------ writes

    def _columns(self, lg: _Log, records: Sequence[AccessRecord], offsets: np.ndarray) -> Prepared:
        n = len(records)
        (t, ms, client, family, prefix, status, sent, body, rtime, conn, conn_reqs, method, uri) = zip(
            *records, strict=True
        )
        assert lg.log_id is not None
        return {
            "time": np.array(t, dtype=np.uint32),
            "time_ms": np.array(ms, dtype=np.uint16),
            "pop": StrColumn(np.zeros(n, dtype=np.int32), [self.pop]),
            "host": StrColumn(np.zeros(n, dtype=np.int32), [self.host]),
            "prefix": _str_column(prefix),
            "family": np.array(family, dtype=np.uint8),
            "client": _str_column(client),
            "status": np.array(status, dtype=np.uint16),
            "bytes_sent": np.array(sent, dtype=np.uint64),
            "body_bytes": np.array(body, dtype=np.uint64),
            "request_time": np.array(rtime, dtype=np.float64),
            "connection": np.array(conn, dtype=np.uint64),
            "connection_requests": np.array(conn_reqs, dtype=np.uint32),
            "method": _str_column(method),
            "uri": _str_column(uri),
            "log_id": np.full(n, lg.log_id, dtype=np.uint64),
            "offset": offsets,
        }

    def _insert_dead_letters(self, lg: _Log, dead: Sequence[tuple[int, bytes, str]]) -> None:
        assert lg.log_id is not None
        n = len(dead)
        topic = dead_letter_topic(self.pop, self.host, lg.log_id, lg.path)
        self.store.insert_columns(
            "ingest_dead_letter",
            {
                "time": np.full(n, int(time.time()), dtype=np.uint32),
                "topic": np.array([topic] * n, dtype=object),
                "partition": np.full(n, -1, dtype=np.int32),
                "offset": np.array([off for off, _, _ in dead], dtype=np.int64),
                "error": np.array([reason for _, _, reason in dead], dtype=object),
                "raw": np.array([raw for _, raw, _ in dead] + [b""], dtype=object)[:n],
            },
        )

    def _record_progress(self, lg: _Log, end: int) -> None:
        self.store.insert_columns(
            "http_log_progress",
            {
                "updated": np.array([int(time.time())], dtype=np.uint32),
                "pop": np.array([self.pop], dtype=object),
                "host": np.array([self.host], dtype=object),
                "log_id": np.array([lg.log_id], dtype=np.uint64),
                "path": np.array([lg.path], dtype=object),
                "end_offset": np.array([end], dtype=np.uint64),
            },
        )


def _str_column(values: Sequence[Any]) -> StrColumn:
    """Codes into the distinct values, in order of first appearance."""
    distinct = list(dict.fromkeys(values))
    index = {v: i for i, v in enumerate(distinct)}
    codes = np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values))
    return StrColumn(codes, distinct)
