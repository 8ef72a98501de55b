"""nginx access logs into http_requests: the line parser, the loader and `dyncc access-log`.

Parser (pure): generated lines in the dyncc log_format round-trip field by field; the client
prefix is spelled exactly as the tcpinfo path spells the collector's prefix (IPv4-mapped
clients are IPv4); arbitrary bytes and damaged lines raise LineError and nothing else, with a
reason naming the field at fault; ranges and the line length are enforced.

Loader, on ClickHouse 18.16 and chDB (the `store` fixture) and on the cluster: good lines land
once, bad ones are dead-lettered with where and why and counted; a second call with nothing
new touches no store; a re-run, a second (stale) loader and a crash between the rows and the
progress record load no line twice; a partial last line waits for its newline; a rotated log
is drained and recognised at its new path, a truncated one is a new log; an over-long line
is dead-lettered; rows the store refuses are loaded in halves.  On the cluster every row sits
on its shard, and a shard that refused a chunk gets only its own missing rows afterwards.

CLI: a one-shot load, SIGKILL between the rows and the progress record then a re-run (server,
cluster), --follow with metrics and SIGTERM, and --follow riding out a store outage (a private
ClickHouse).  Bad options (exit 2, one line) are rows of tests/dyncc/test_cli.py.
"""

from __future__ import annotations

import ipaddress
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.telemetry.prefixes import client_prefixes
from controller.ingest.access_loader import MIN_CHUNK_BYTES, AccessLogLoader, LoadResult, dead_letter_topic
from controller.ingest.access_log import MAX_LINE_BYTES, AccessRecord, LineError, log_id_of, parse_line
from controller.ingest.columns import prefix_column
from controller.ingest.settings import MIN_ACCESS_CHUNK_BYTES
from controller.store import ClusterStore, Store, StoreError, open_store
from controller.store.migrate import apply_migrations
from controller.store.topology import shard_of
from schemas.addresses import MAPPED_PREFIX
from tests.support.cluster_util import shard_table_renamed, sync_replicas
from tests.support.private_server import PrivateServer

ROOT = Path(__file__).resolve().parents[3]
POP, HOST = "p0", "p0e0"
T0 = 1_763_948_000  # 2025-11-24
PRIVATE_CH = {"DYNCC_CH_TCP_PORT": "20250", "DYNCC_CH_HTTP_PORT": "20251", "DYNCC_CH_INTERSERVER_PORT": "20252"}


# ------------------------------------------------------------------ lines


def nginx_addr(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, mapped: bool = False) -> str:
    """$remote_addr as nginx prints it: IPv6 compressed lower case, a mapped client ::ffff:a.b.c.d."""
    if isinstance(ip, ipaddress.IPv4Address):
        return f"::ffff:{ip}" if mapped else str(ip)
    return ip.compressed


def line(
    t_ms: int = T0 * 1000,
    addr: str = "2001:db8:101:300::2",
    status: int = 200,
    sent: int = 1048931,
    body: int = 1048576,
    rt_ms: int = 874,
    conn: int = 17,
    creq: int = 2,
    request: str = "GET /obj/1m-3.bin HTTP/1.1",
) -> bytes:
    """One line of the dyncc log_format, as nginx writes it."""
    s, ms = divmod(t_ms, 1000)
    r_s, r_ms = divmod(rt_ms, 1000)
    return f'{s}.{ms:03d} {addr} {status:03d} {sent} {body} {r_s}.{r_ms:03d} {conn} {creq} "{request}"'.encode()


def good(i: int, addr: str = "2001:db8:101:300::2") -> bytes:
    """A distinct good line (its time and connection differ by i)."""
    return line(t_ms=(T0 + i) * 1000 + i % 1000, addr=addr, conn=1000 + i, request=f"GET /obj/{i}.bin HTTP/1.1")


def collector_prefix(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, v4_len: int, v6_len: int) -> str:
    """The prefix text tcpinfo holds for a socket whose remote address is `ip` (collector -> ingest)."""
    raw = MAPPED_PREFIX + ip.packed if isinstance(ip, ipaddress.IPv4Address) else ip.packed
    p16, plen = client_prefixes(np.frombuffer(raw, dtype=np.uint8).reshape(1, 16), v4_len, v6_len)
    return prefix_column(p16, plen).values[0]


# ------------------------------------------------------------------ parser


def test_the_example_line() -> None:
    rec = parse_line(b'1763948000.123 2001:db8:101:300::2 200 1048931 1048576 0.874 17 2 "GET /obj/1m-3.bin HTTP/1.1"')
    assert rec == AccessRecord(
        1763948000, 123, "2001:db8:101:300::2", 10, "2001:db8:101:300::/56", 200, 1048931, 1048576, 0.874, 17, 2,
        "GET", "/obj/1m-3.bin",
    )  # fmt: skip


def test_an_ipv4_mapped_client_is_its_ipv4_prefix() -> None:
    rec = parse_line(line(addr="::ffff:198.51.100.77"))
    assert (rec.client, rec.family, rec.prefix) == ("198.51.100.77", 2, "198.51.100.0/24")
    assert parse_line(line(addr="203.0.113.9")).prefix == "203.0.113.0/24"
    assert parse_line(line(addr="::FFFF:203.0.113.9")).prefix == "203.0.113.0/24"


_TOKEN = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1, max_size=10)
_URI = st.text(alphabet=[chr(c) for c in range(0x21, 0x7F) if chr(c) != '"'], min_size=1, max_size=200)
IP = ipaddress.IPv4Address | ipaddress.IPv6Address


def _not_mapped(a: IP) -> bool:
    return not (isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None)


_ADDR: st.SearchStrategy[tuple[IP, str]] = st.one_of(
    st.ip_addresses(v=4).map(lambda a: (a, nginx_addr(a))),
    st.ip_addresses(v=4).map(lambda a: (a, nginx_addr(a, mapped=True))),
    st.ip_addresses(v=6).filter(_not_mapped).map(lambda a: (a, nginx_addr(a))),
)


@given(
    t_ms=st.integers(0, (1 << 32) * 1000 - 1),
    addr=_ADDR,
    status=st.integers(0, 999),
    sent=st.integers(0, (1 << 64) - 1),
    body=st.integers(0, (1 << 64) - 1),
    rt_ms=st.integers(0, 10**10 * 1000 - 1),
    conn=st.integers(0, (1 << 64) - 1),
    creq=st.integers(0, (1 << 32) - 1),
    method=_TOKEN,
    uri=_URI,
    lengths=st.tuples(st.integers(0, 32), st.integers(0, 128)),
)
def test_generated_lines_round_trip(
    t_ms: int,
    addr: tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, str],
    status: int,
    sent: int,
    body: int,
    rt_ms: int,
    conn: int,
    creq: int,
    method: str,
    uri: str,
    lengths: tuple[int, int],
) -> None:
    ip, text = addr
    raw = line(t_ms, text, status, sent, body, rt_ms, conn, creq, f"{method} {uri} HTTP/1.1")
    rec = parse_line(raw, *lengths)
    assert (rec.time, rec.time_ms) == divmod(t_ms, 1000)
    assert (rec.status, rec.bytes_sent, rec.body_bytes, rec.connection, rec.connection_requests) == (
        status, sent, body, conn, creq,
    )  # fmt: skip
    assert rec.request_time == float(f"{rt_ms // 1000}.{rt_ms % 1000:03d}")
    assert (rec.method, rec.uri) == (method, uri)
    assert rec.client == str(ip)
    assert rec.family == (2 if isinstance(ip, ipaddress.IPv4Address) else 10)
    assert rec.prefix == collector_prefix(ip, *lengths)  # spelled as tcpinfo spells it


@given(st.binary(max_size=400))
def test_arbitrary_bytes_raise_only_line_error(data: bytes) -> None:
    try:
        parse_line(data)
    except LineError as exc:
        assert str(exc) and "\n" not in str(exc)


@given(st.integers(0, 200), st.binary(min_size=0, max_size=8), st.integers(0, 8))
def test_damaged_lines_raise_only_line_error(at: int, insert: bytes, cut: int) -> None:
    base = line()
    at = min(at, len(base))
    damaged = base[:at] + insert + base[at + cut :]
    try:
        rec = parse_line(damaged)
    except LineError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert isinstance(rec, AccessRecord)


BAD = [
    (b"", "empty line"),
    (b"garbage", "no double-quoted $request"),
    (line().replace(b" 200 ", b" 20x "), "$status '20x'"),
    (line().replace(b"1763948000.000", b"1763948000"), "$msec"),
    (line().replace(b"0.874", b"-0.874"), "$request_time"),
    (line(addr="unix:"), "$remote_addr"),
    (line(addr="999.1.2.3"), "is not an IP address"),
    (line(addr="fe80::1%eth0"), "$remote_addr"),
    (line(addr="01.2.3.4"), "is not an IP address"),
    (line(t_ms=(1 << 32) * 1000), "DateTime range"),
    (line(sent=1 << 64), "$bytes_sent"),
    (line(body=1 << 64), "$body_bytes_sent"),
    (line(conn=1 << 64), "$connection 18446744073709551616"),
    (line(creq=1 << 32), "$connection_requests"),
    (line(request='GET /a"b HTTP/1.1'), "one double-quoted field"),
    (line(request="GET /\xe9 HTTP/1.1"), "not printable ASCII"),
    (line() + b"\r", "not printable ASCII"),
    (line() + b" extra", "one double-quoted field"),
    (b'1763948000.000  2001:db8::1 200 1 1 0.001 1 1 "-"', "fields before the $request"),
    (line(request="x" * MAX_LINE_BYTES), "-byte limit"),
]


@pytest.mark.parametrize(("raw", "needle"), BAD, ids=[n for _, n in BAD])
def test_bad_lines_name_the_field_at_fault(raw: bytes, needle: str) -> None:
    with pytest.raises(LineError) as info:
        parse_line(raw)
    assert needle in str(info.value)


def test_requests_nginx_could_not_read_and_bounds_that_pass() -> None:
    assert parse_line(line(request="-"))[-2:] == ("", "")
    assert parse_line(line(request=""))[-2:] == ("", "")
    assert parse_line(line(request="GET /"))[-2:] == ("GET", "/")  # HTTP/0.9
    assert parse_line(line(request="GET /a b HTTP/1.1"))[-2:] == ("GET", "/a b")
    assert parse_line(line(request="\\x16\\x03\\x01\\x02"))[-2:] == ("\\x16\\x03\\x01\\x02", "")
    top = parse_line(line(t_ms=(1 << 32) * 1000 - 1, sent=(1 << 64) - 1, conn=(1 << 64) - 1, creq=(1 << 32) - 1))
    assert (top.time, top.bytes_sent, top.connection, top.connection_requests) == (
        (1 << 32) - 1, (1 << 64) - 1, (1 << 64) - 1, (1 << 32) - 1,
    )  # fmt: skip
    longest = line(request="G" * (MAX_LINE_BYTES - len(line(request=""))))
    assert len(longest) == MAX_LINE_BYTES and parse_line(longest).method


def test_log_identity_is_the_first_line() -> None:
    assert log_id_of(good(1) + b"\n") == log_id_of(good(1) + b"\n")
    assert log_id_of(good(1) + b"\n") != log_id_of(good(2) + b"\n")
    assert 0 <= log_id_of(b"") < 1 << 64


def test_the_settings_floor_holds_the_longest_line() -> None:
    assert MIN_ACCESS_CHUNK_BYTES >= MIN_CHUNK_BYTES > MAX_LINE_BYTES


# ------------------------------------------------------------------ loader helpers


def write(path: Path, lines: list[bytes], tail: bytes = b"", mode: str = "wb") -> None:
    with open(path, mode) as fh:
        fh.write(b"".join(x + b"\n" for x in lines) + tail)


def offsets_of(lines: list[bytes], start: int = 0) -> list[int]:
    out, off = [], start
    for x in lines:
        out.append(off)
        off += len(x) + 1
    return out


def loaded(store: Store, url: str = "") -> Counter[tuple[int, int]]:
    """(log_id, offset) -> rows in http_requests (a cluster's `url`: its replicas synced first)."""
    if url:
        sync_replicas(url)
    rows = store.query_rows("SELECT log_id, offset, count() FROM http_requests GROUP BY log_id, offset")
    return Counter({(int(a), int(b)): int(n) for a, b, n in rows})


def dead_letters(store: Store) -> list[tuple[str, int, str, bytes]]:
    rows = store.query_rows(
        "SELECT topic, offset, error, raw FROM ingest_dead_letter FINAL WHERE partition = -1 ORDER BY topic, offset"
    )
    return [(str(t), int(o), str(e), r if isinstance(r, bytes) else str(r).encode()) for t, o, e, r in rows]


def the_log(path: Path) -> int:
    with open(path, "rb") as fh:
        return log_id_of(fh.readline())


def unreachable() -> Store:
    """A real store nobody answers (a call that touched it would fail)."""
    return open_store("clickhouse://default:@127.0.0.1:1/nowhere?connect_timeout=1")


@pytest.fixture
def cluster(cluster_db_url: str) -> Iterator[ClusterStore]:
    store = open_store(cluster_db_url)
    assert isinstance(store, ClusterStore)
    try:
        apply_migrations(store)
        yield store
    finally:
        store.close()


# ------------------------------------------------------------------ loader


def test_good_bad_and_repeated_lines_then_a_rerun_loads_nothing(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    goods = [good(i, addr=f"2001:db8:101:{i % 4}00::2") for i in range(30)]
    bad = [b"garbage", line().replace(b" 200 ", b" 2x0 "), line(request="GET /\x01 HTTP/1.1")]
    lines = goods[:10] + bad[:1] + goods[10:20] + bad[1:] + goods[20:] + [goods[0]]  # goods[0] twice: two requests
    partial = good(99)[:40]
    write(path, lines, tail=partial)
    loader = AccessLogLoader(store, pop=POP, host=HOST, chunk_lines=7)
    first = loader.load(path)
    assert (first.lines, first.rows, first.dead_letters, first.duplicates) == (34, 31, 3, 0)
    assert first.behind == len(partial) and first.new_logs == 1 and first.chunks == 5
    log_id, offs = the_log(path), offsets_of(lines)
    want = Counter({(log_id, off): 1 for x, off in zip(lines, offs, strict=True) if x not in bad})
    assert loaded(store) == want
    topic = dead_letter_topic(POP, HOST, log_id, str(path))
    dead = dead_letters(store)
    assert [(t, o, r) for t, o, _, r in dead] == [(topic, offs[lines.index(b)], b) for b in bad]
    assert "no double-quoted $request" in dead[0][2] and "$status" in dead[1][2] and "byte 0x01" in dead[2][2]
    assert loader.metrics.registry.get_sample_value("dyncc_access_log_dead_letters_total") == 3  # counted

    real = loader.store
    loader.store = unreachable()  # nothing new: answered without the store
    try:
        again = loader.load(path)
    finally:
        loader.store.close()
        loader.store = real
    assert (again.lines, again.rows, again.behind) == (0, 0, len(partial))

    rerun = AccessLogLoader(store, pop=POP, host=HOST).load(path)
    assert (rerun.lines, rerun.rows, rerun.dead_letters) == (0, 0, 0)

    with open(path, "ab") as fh:  # the partial line completed
        fh.write(good(99)[40:] + b"\n")
    done = loader.load(path)
    assert (done.lines, done.rows, done.behind) == (1, 1, 0)
    want[(log_id, offs[-1] + len(lines[-1]) + 1)] = 1
    assert loaded(store) == want
    rows = store.query_rows("SELECT count(), uniqExact(prefix), min(family), max(family) FROM http_requests")[0]
    assert tuple(int(x) for x in rows) == (32, 4, 10, 10)
    loader.close()


def test_ipv4_mapped_clients_are_stored_as_ipv4_prefixes(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    write(path, [good(1, "::ffff:198.51.100.20"), good(2, "198.51.100.30"), good(3, "2001:db8:101:300::2")])
    assert AccessLogLoader(store, pop=POP, host=HOST).load(path).rows == 3
    rows = store.query_rows("SELECT client, family, prefix FROM http_requests ORDER BY offset")
    assert [tuple(r) for r in rows] == [
        ("198.51.100.20", 2, "198.51.100.0/24"),
        ("198.51.100.30", 2, "198.51.100.0/24"),
        ("2001:db8:101:300::2", 10, "2001:db8:101:300::/56"),
    ]


class Crash(Exception):
    pass


def crash_at(n: int) -> Callable[[], None]:
    """An after_insert hook that raises on its n-th call (the process 'dies' there)."""
    calls = [0]

    def hook() -> None:
        calls[0] += 1
        if calls[0] == n:
            raise Crash(f"crash after the rows of chunk {n}")

    return hook


def test_a_crash_between_the_rows_and_the_progress_record_duplicates_nothing(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    lines = [good(i, f"2001:db8:101:{i % 8}00::2") for i in range(40)]
    lines[12] = b"bad line"
    write(path, lines)
    dying = AccessLogLoader(store, pop=POP, host=HOST, chunk_lines=5, after_insert=crash_at(3))
    with pytest.raises(Crash):
        dying.load(path)
    dying.close()
    log_id = the_log(path)
    assert len(loaded(store)) == 14  # chunks 1-3 landed (15 lines, one bad), no progress for chunk 3
    after = AccessLogLoader(store, pop=POP, host=HOST, chunk_lines=5).load(path)
    assert after.rows == 25 and after.duplicates == 1  # the last line of chunk 3 (its ledger offset) read again
    want = Counter({(log_id, off): 1 for x, off in zip(lines, offsets_of(lines), strict=True) if x != b"bad line"})
    assert loaded(store) == want
    assert len(dead_letters(store)) == 1


def test_a_second_loader_with_stale_state_loads_nothing_twice(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    lines = [good(i) for i in range(20)]
    write(path, lines[:5])
    a = AccessLogLoader(store, pop=POP, host=HOST)
    b = AccessLogLoader(store, pop=POP, host=HOST)
    assert b.load(path).rows == 5
    write(path, lines[5:], mode="ab")
    assert a.load(path).rows == 15  # a never saw the first 5: the store says they are in
    assert b.load(path).rows == 0  # b's own position is stale: the store says the rest is in
    assert loaded(store) == Counter({(the_log(path), off): 1 for off in offsets_of(lines)})


def test_a_load_stopped_between_chunks_goes_on_at_the_next_call(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    lines = [good(i) for i in range(12)]
    write(path, lines)
    loader = AccessLogLoader(store, pop=POP, host=HOST, chunk_lines=5)
    asked = [0]

    def stop() -> bool:  # SIGTERM after the first chunk
        asked[0] += 1
        return asked[0] > 1

    assert loader.load(path, stop=stop).rows == 5
    assert loader.load(path).rows == 7  # the file did not change, the rest is still new
    assert loaded(store) == Counter({(the_log(path), off): 1 for off in offsets_of(lines)})


def test_rotation_drains_the_old_file_and_truncation_starts_a_new_log(store: Store, tmp_path: Path) -> None:
    path, rotated = tmp_path / "access.log", tmp_path / "access.log.1"
    a = [good(i) for i in range(5)]
    b = [good(i) for i in range(5, 8)]
    c = [good(i) for i in range(8, 12)]
    write(path, a)
    loader = AccessLogLoader(store, pop=POP, host=HOST)
    assert loader.load(path).rows == 5
    path.rename(rotated)  # logrotate; nginx writes on to the old file until it reopens its log
    write(rotated, b, tail=b"1763948999.000 198.51", mode="ab")
    write(path, c)
    step = loader.load(path)
    assert (step.rows, step.new_logs) == (7, 1)
    assert loader.load(path).rows == 0  # the old file did not grow: kept one more call
    let_go = loader.load(path)
    assert let_go.dead_letters == 1  # its line without a newline, when let go
    old_log, new_log = log_id_of(a[0] + b"\n"), log_id_of(c[0] + b"\n")
    assert dead_letters(store)[0][2].startswith("incomplete last line")
    # more in the old file (after the bytes of the dead-lettered partial line), read by its new
    # name: the same log, so only that is new
    write(rotated, [good(20)], mode="ab")
    assert AccessLogLoader(store, pop=POP, host=HOST).load(rotated).rows == 1
    d = [good(i) for i in range(30, 33)]
    write(path, d)  # copytruncate: the same file, new content
    trunc = loader.load(path)
    assert (trunc.rows, trunc.new_logs) == (3, 1)
    got = loaded(store)
    assert sum(got.values()) == 5 + 3 + 4 + 1 + 3 and max(got.values()) == 1
    assert {log for log, _ in got} == {old_log, new_log, log_id_of(d[0] + b"\n")}
    loader.close()


def test_an_over_long_line_is_dead_lettered_and_the_next_lines_load(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    huge = b"x" * (MAX_LINE_BYTES * 3)
    write(path, [good(1), huge, good(2)], tail=huge[:100_000])
    loader = AccessLogLoader(store, pop=POP, host=HOST, chunk_bytes=MIN_CHUNK_BYTES)
    result = loader.load(path)
    assert (result.rows, result.dead_letters, result.behind) == (2, 1, 100_000)
    (_, off, reason, raw) = dead_letters(store)[0]
    assert off == len(good(1)) + 1 and f"{len(huge)} bytes, over the {MAX_LINE_BYTES}-byte limit" in reason
    assert len(raw) == MAX_LINE_BYTES
    with open(path, "ab") as fh:
        fh.write(b"\n" + good(3) + b"\n")
    assert (r := loader.load(path)).dead_letters == 1 and r.rows == 1
    loader.close()


def test_rows_the_store_refuses_are_loaded_in_halves(
    store: Store, store_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One INSERT spanning 150 monthly partitions: chDB refuses it (max_partitions_per_insert_block);
    the halves land, every line once.  ClickHouse 18.16 has no such limit and takes it whole."""
    path = tmp_path / "access.log"
    lines = [line(t_ms=(T0 - i * 31 * 86400) * 1000, conn=i) for i in range(150)]
    write(path, lines)
    result = AccessLogLoader(store, pop=POP, host=HOST).load(path)
    assert (result.rows, result.dead_letters) == (150, 0)
    assert ("loading them in halves" in caplog.text) == store_url.startswith("chdb")
    assert loaded(store) == Counter({(the_log(path), off): 1 for off in offsets_of(lines)})


# ------------------------------------------------------------------ cluster


def _shard_rows(cluster: ClusterStore) -> list[set[tuple[str, int]]]:
    return [
        {(str(p), int(o)) for p, o in shard.query_rows("SELECT prefix, offset FROM http_requests")}
        for shard in cluster.shard_stores()
    ]


@pytest.mark.clickhouse
def test_cluster_rows_on_their_shards_once_after_a_crash_and_a_shard_failure(
    cluster: ClusterStore, cluster_db_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "access.log"
    lines = [good(i, f"2001:db8:{i % 16:x}00::2" if i % 3 else f"198.51.{i % 7}.9") for i in range(60)]
    write(path, lines)
    dying = AccessLogLoader(cluster, pop=POP, host=HOST, chunk_lines=10, after_insert=crash_at(2))
    with pytest.raises(Crash):
        dying.load(path)
    dying.close()
    # shard 0 takes chunk 3's rows, shard 1 refuses them
    with shard_table_renamed(cluster, 1, "http_requests", "http_requests_away"), pytest.raises(StoreError):
        AccessLogLoader(cluster, pop=POP, host=HOST, chunk_lines=10).load(path)
    result = AccessLogLoader(cluster, pop=POP, host=HOST, chunk_lines=10).load(path)
    assert result.duplicates > 0  # shard 0's rows of chunk 3 were not sent again
    log_id = the_log(path)
    assert loaded(cluster, cluster_db_url) == Counter({(log_id, off): 1 for off in offsets_of(lines)})
    weights = cluster.shard_weights()
    per_shard = _shard_rows(cluster)
    assert all(per_shard)
    for index, rows in enumerate(per_shard):
        assert all(shard_of(POP, prefix, weights) == index for prefix, _ in rows)
    rerun = AccessLogLoader(cluster, pop=POP, host=HOST).load(path)
    assert (rerun.lines, rerun.rows) == (0, 0)


# ------------------------------------------------------------------ CLI


def dyncc(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dyncc.cli", "access-log", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.clickhouse
@pytest.mark.parametrize("where", ["clickhouse", "cluster"])
def test_cli_one_shot_and_sigkill_between_the_rows_and_the_progress(
    where: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = str(request.getfixturevalue("clickhouse_db_url" if where == "clickhouse" else "cluster_db_url"))
    path = tmp_path / "access.log"
    lines = [good(i, f"2001:db8:{i % 16:x}00::2") for i in range(50)] + [b"bad"]
    write(path, lines)
    base = ("--clickhouse", url, "--pop", POP, "--host", HOST, "--chunk-lines", "20", str(path))
    killed = dyncc(*base, env={"DYNCC_ACCESS_LOG_CRASH_AFTER_INSERT": "1"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    first = dyncc(*base)
    assert first.returncode == 0, first.stderr[-2000:]
    summary = re.search(r"(\d+) rows, (\d+) already loaded, (\d+) dead letters", first.stderr)
    assert summary is not None, first.stderr[-2000:]
    rows, skipped, dead = map(int, summary.groups())
    assert (rows, dead) == (30, 1) and skipped >= 1  # the end of chunk 1 read again, and skipped
    again = dyncc(*base)
    assert again.returncode == 0 and "0 lines: 0 rows" in again.stderr, again.stderr[-2000:]
    store = open_store(url)
    try:
        want = Counter({(the_log(path), off): 1 for off in offsets_of(lines[:-1])})
        assert loaded(store, url if where == "cluster" else "") == want
    finally:
        store.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, check: Callable[[], bool], timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {timeout:.0f}s; log:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def _rows(url: str) -> int:
    try:
        store = open_store(url)
    except StoreError:
        return -1
    try:
        return int(store.query_rows("SELECT count() FROM http_requests")[0][0])
    except StoreError:
        return -1
    finally:
        store.close()


class Follower:
    """`dyncc access-log --follow` as a subprocess; its stderr in a file."""

    def __init__(self, log: Path, *args: str) -> None:
        self.log = log
        self._fh = open(log, "w")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dyncc.cli", "access-log", *args],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self._fh,
            start_new_session=True,
        )

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait()
        finally:
            self._fh.close()


@pytest.mark.clickhouse
def test_cli_follow_loads_what_is_new_serves_metrics_and_stops_on_sigterm(
    clickhouse_db_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "access.log"
    write(path, [good(i) for i in range(5)])
    port = _free_port()
    f = Follower(tmp_path / "follow.log", "--clickhouse", clickhouse_db_url, "--pop", POP, "--host", HOST,
                 "--follow", "200ms", "--metrics-port", str(port), str(path))  # fmt: skip
    try:
        _wait("the first lines", lambda: _rows(clickhouse_db_url) == 5, 60, f.log)
        write(path, [good(i) for i in range(5, 12)] + [b"bad"], tail=good(12)[:10], mode="ab")
        _wait("the new lines", lambda: _rows(clickhouse_db_url) == 12, 30, f.log)
        want = (
            "dyncc_access_log_rows_total 12.0",
            "dyncc_access_log_dead_letters_total 1.0",
            f'dyncc_access_log_behind_bytes{{file="{path}"}} 10.0',
        )

        def scrape() -> str:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()

        # the cycle counts its rows once the insert has returned: the rows can be seen a moment before
        _wait("the new lines' metrics", lambda: all(w in scrape() for w in want), 30, f.log)
        metrics = scrape()
        for w in want:
            assert w in metrics
    finally:
        rc = f.stop()
    text = f.log.read_text()
    assert rc == 0, text[-3000:]
    assert "Traceback" not in text
    assert text.count("cycle: ") >= 2 and "stopped (SIGTERM)" in text  # one line per cycle


@pytest.fixture
def private_clickhouse(clickhouse_db_url: str) -> Iterator[PrivateServer]:
    """A ClickHouse 18.16 of this test's own, to stop and start (clickhouse_db_url: the server is installed)."""
    server = PrivateServer("clickhouse", **PRIVATE_CH)
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.mark.clickhouse
@pytest.mark.slow
def test_cli_follow_rides_out_a_store_outage(private_clickhouse: PrivateServer, tmp_path: Path) -> None:
    url = f"clickhouse://default:@127.0.0.1:{PRIVATE_CH['DYNCC_CH_TCP_PORT']}/dal?connect_timeout=1&timeout=30"
    path = tmp_path / "access.log"
    write(path, [good(i) for i in range(10)])
    f = Follower(tmp_path / "follow.log", "--clickhouse", url, "--pop", POP, "--host", HOST, "--follow", "200ms",
                 "--backoff-max", "1s", str(path))  # fmt: skip
    try:
        _wait("the first lines", lambda: _rows(url) == 10, 60, f.log)
        private_clickhouse.stop()
        write(path, [good(i) for i in range(10, 25)], mode="ab")
        _wait("a failed cycle", lambda: "cycle failed" in f.log.read_text(), 30, f.log)
        time.sleep(2)  # a few retries while the store is down
        private_clickhouse.start()
        _wait("the lines written during the outage", lambda: _rows(url) == 25, 60, f.log)
        assert f.proc.poll() is None
    finally:
        rc = f.stop()
    text = f.log.read_text()
    assert rc == 0, text[-3000:]
    store = open_store(url)
    try:
        assert loaded(store) == Counter({(the_log(path), off): 1 for off in offsets_of(
            [good(i) for i in range(25)])})  # fmt: skip
    finally:
        store.close()


def test_load_result_adds_up() -> None:
    total = LoadResult()
    total.add(LoadResult(lines=3, rows=2, dead_letters=1, bytes=10, chunks=1, seconds=0.5))
    total.add(LoadResult(lines=1, rows=1, duplicates=4, behind=7, new_logs=1, seconds=0.25))
    assert (total.lines, total.rows, total.duplicates, total.dead_letters, total.behind, total.new_logs) == (
        4, 3, 4, 1, 7, 1,
    )  # fmt: skip
    assert total.seconds == 0.75 and "4 lines: 3 rows" in total.summary()
