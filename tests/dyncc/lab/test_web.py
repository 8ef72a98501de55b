"""The lab's HTTP: the object set and nginx config (pure), then real nginx in a namespace serving
real GETs from many source addresses, its access log in the `dyncc` format, and the load process.

The namespace tests need root and nginx; they skip (saying which) only when either is absent.
Every namespace and process they create is removed, on failure too.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dyncc.lab import http_load, web
from dyncc_common.errors import ConfigError
from tests.support.lab_util import mean_size
from tests.support.netns_util import namespaces, new_ns_name, ns_sh, require_root, sh, veth_pair

# the contract of the brief, byte for byte
BRIEF_FORMAT = (
    '$msec $remote_addr $status $bytes_sent $body_bytes_sent $request_time $connection $connection_requests "$request"'
)
LOG_LINE = re.compile(
    r"^(?P<msec>\d+\.\d{3}) (?P<addr>[0-9a-fA-F:.]+) (?P<status>\d{3}) (?P<bytes_sent>\d+) "
    r'(?P<body>\d+) (?P<rtime>\d+\.\d{3}) (?P<conn>\d+) (?P<conn_req>\d+) "(?P<request>[^"]*)"$'
)
PORT = 8080
EDGE_V4, CLIENT_LINK_V4 = "192.0.2.1", "192.0.2.2"
EDGE_V6, CLIENT_LINK_V6 = "2001:db8:ff00::1", "2001:db8:ff00::2"
SOURCES_V4 = ("198.51.100.2", "203.0.113.2")
SOURCES_V6 = ("2001:db8:101:100::2", "2001:db8:101:200::2", "2001:db8:101:300::2")
KB100 = 102400


# ------------------------------------------------------------------ pure


def test_catalogue_size_mix() -> None:
    objs = web.catalogue()
    assert len({o.uri for o in objs}) == len(objs) == len(web.SIZES) * web.COPIES
    assert all(o.uri.startswith("/obj/") and o.uri.endswith(".bin") and o.weight > 0 for o in objs)
    sizes = sorted({o.size for o in objs})
    assert min(sizes) < KB100 and max(sizes) >= 5 << 20
    assert sum(s < KB100 for s in sizes) >= 3 and sum(s > KB100 for s in sizes) >= 4
    # 90 KB stays under the 100 KB goodput threshold with headers; 150 KB is above it
    assert any(KB100 - 12_000 < s + 300 < KB100 for s in sizes)
    below = sum(o.weight for o in objs if o.size < KB100) / sum(o.weight for o in objs)
    assert 0.4 < below < 0.75
    assert 200_000 < mean_size(objs) < 1_000_000
    # copies share a size's weight
    assert mean_size(web.catalogue(1)) == pytest.approx(mean_size(objs))
    with pytest.raises(ConfigError):
        web.catalogue(0)


def test_write_docroot_sizes(tmp_path: Path) -> None:
    objs = web.catalogue(2)
    web.write_docroot(tmp_path / "root", objs)
    for o in objs:
        path = tmp_path / "root" / o.uri.lstrip("/")
        assert path.stat().st_size == o.size
        assert path.stat().st_mode & 0o004  # nginx workers may read it
    (tmp_path / "root" / objs[0].uri.lstrip("/")).write_bytes(b"x")
    web.write_docroot(tmp_path / "root", objs)  # a wrong size is rewritten
    assert (tmp_path / "root" / objs[0].uri.lstrip("/")).stat().st_size == objs[0].size


def test_nginx_conf_text(tmp_path: Path) -> None:
    assert BRIEF_FORMAT == web.ACCESS_LOG_FORMAT
    conf = web.nginx_conf(tmp_path / "w", tmp_path / "root", 8081)
    lines = [ln.strip() for ln in conf.splitlines()]
    assert f"log_format dyncc '{BRIEF_FORMAT}';" in lines
    work = str((tmp_path / "w").resolve())
    assert f"access_log {work}/access.log dyncc;" in lines
    assert "worker_processes 1;" in lines and "sendfile on;" in lines
    assert f"root {(tmp_path / 'root').resolve()};" in lines
    listens = [ln for ln in lines if ln.startswith("listen ")]
    assert [ln.split()[1] for ln in listens] == ["8081", "[::]:8081"]
    # every path nginx writes is inside the work directory
    for key in ("pid", "error_log", "access_log", "client_body_temp_path", "proxy_temp_path", "fastcgi_temp_path"):
        [line] = [ln for ln in lines if ln.startswith(key + " ")]
        assert line.split()[1].startswith(work + "/"), line
    # no logging besides errors and the one access log
    assert sum("_log " in ln for ln in lines) == 2


def test_virtual_client_parse() -> None:
    vc = http_load.VirtualClient.parse("2001:db8:101:300::2=2001:db8:ff00::1, 2001:db8:ff00:1::1")
    assert vc == http_load.VirtualClient("2001:db8:101:300::2", ("2001:db8:ff00::1", "2001:db8:ff00:1::1"))
    assert http_load.VirtualClient.parse(vc.arg()) == vc
    for bad in ("198.51.100.2", "=192.0.2.1", "198.51.100.2=", "198.51.100.2=,"):
        with pytest.raises(ValueError):
            http_load.VirtualClient.parse(bad)


def test_read_clients(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"clients": [{"addr": "198.51.100.2", "edges": ["192.0.2.1", "192.0.2.5"]}]}))
    assert http_load.read_clients(path) == [http_load.VirtualClient("198.51.100.2", ("192.0.2.1", "192.0.2.5"))]


@given(
    name=st.text("abcdefghij-0123456789", min_size=1, max_size=20),
    counts=st.lists(st.integers(0, 10**12), min_size=7, max_size=7),
    elapsed=st.floats(0.1, 1e5),
)
def test_stats_line_round_trip(name: str, counts: list[int], elapsed: float) -> None:
    stats = http_load.Stats(*counts)
    parsed = http_load.parse_stats_line(http_load.stats_line(name, 3, stats, elapsed, 1.5))
    assert parsed["name"] == name and parsed["clients"] == "3" and parsed["cpu_s"] == "1.50"
    for key in ("connections", "requests", "ok", "bytes", "errors", "timeouts", "bad"):
        assert int(parsed[key]) == getattr(stats, key)
    assert http_load.parse_stats_line("client 192.0.2.1: 3 connections") == {}


NGINX_HEAD = (
    b"HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Tue, 24 Nov 2026 01:20:41 GMT\r\n"
    b"Content-Type: application/octet-stream\r\nContent-Length: 6291456\r\n"
    b"Last-Modified: Tue, 24 Nov 2026 01:20:41 GMT\r\nConnection: keep-alive\r\n"
    b'ETag: "6b04e669-600000"\r\nAccept-Ranges: bytes'
)


def test_parse_head() -> None:
    assert http_load.parse_head(NGINX_HEAD) == (200, 6291456, True)
    assert http_load.parse_head(NGINX_HEAD.replace(b"keep-alive", b"close")) == (200, 6291456, False)
    assert http_load.parse_head(b"HTTP/1.1 404 Not Found\r\ncontent-length: 146") == (404, 146, True)
    assert http_load.parse_head(b"HTTP/1.0 200 OK\r\nContent-Length: 5") == (200, 5, False)
    assert http_load.parse_head(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\nConnection: Keep-Alive") == (200, 5, True)
    for bad in (
        b"HTTP/1.1 200 OK\r\nConnection: close",  # no length
        b"HTTP/2 200\r\nContent-Length: 5",
        b"HTTP/1.1 OK\r\nContent-Length: 5",
        b"HTTP/1.1 200 OK\r\nContent-Length: -5",
        b"HTTP/1.1 200 OK\r\nno colon here\r\nContent-Length: 5",
        b"",
    ):
        with pytest.raises(ValueError):
            http_load.parse_head(bad)


@given(
    status=st.integers(100, 599),
    length=st.integers(0, 10**12),
    close=st.booleans(),
    extra=st.lists(st.tuples(st.text("abcxyz-", min_size=1, max_size=8), st.text("abc 12;=", max_size=12)), max_size=4),
)
def test_parse_head_round_trip(status: int, length: int, close: bool, extra: list[tuple[str, str]]) -> None:
    lines = [f"HTTP/1.1 {status} Whatever", *(f"{k}: {v}" for k, v in extra), f"CONTENT-length: {length}"]
    if close:
        lines.append("connection:  Close ")
    assert http_load.parse_head("\r\n".join(lines).encode()) == (status, length, not close)


@given(st.binary(max_size=200))
def test_parse_head_rejects_junk_with_value_error(head: bytes) -> None:
    try:
        status, length, _ = http_load.parse_head(head)
    except ValueError:
        return
    assert status >= 0 and length >= 0


def test_missing_nginx_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(web, "NGINX_SEARCH_PATH", ())
    with pytest.raises(ConfigError, match="nginx not found"):
        web.find_nginx()


# ------------------------------------------------------------------ namespaces


@dataclass
class WebLab:
    edge: str
    client: str
    docroot: Path
    workdir: Path


def _require_nginx() -> None:
    require_root()
    try:
        web.find_nginx()
    except ConfigError as exc:
        pytest.skip(f"needs nginx: {exc}")


@pytest.fixture
def weblab(tmp_path: Path) -> Iterator[WebLab]:
    """An edge namespace and a client namespace holding 2 IPv4 and 3 IPv6 client addresses."""
    _require_nginx()
    names = [new_ns_name("hpb-web"), new_ns_name("hpb-cli")]
    with namespaces(names) as (edge, client):
        veth_pair(edge, "eth0", client, "eth0")
        ns_sh(edge, "ip", "addr", "add", f"{EDGE_V4}/24", "dev", "eth0")
        ns_sh(edge, "ip", "-6", "addr", "add", f"{EDGE_V6}/64", "dev", "eth0", "nodad")
        ns_sh(client, "ip", "addr", "add", f"{CLIENT_LINK_V4}/24", "dev", "eth0")
        ns_sh(client, "ip", "-6", "addr", "add", f"{CLIENT_LINK_V6}/64", "dev", "eth0", "nodad")
        for addr in SOURCES_V4:
            ns_sh(client, "ip", "addr", "add", f"{addr}/32", "dev", "eth0")
            net = ipaddress.ip_network(f"{addr}/24", strict=False)
            ns_sh(edge, "ip", "route", "add", str(net), "via", CLIENT_LINK_V4)
        for addr in SOURCES_V6:
            ns_sh(client, "ip", "-6", "addr", "add", f"{addr}/128", "dev", "eth0", "nodad")
        ns_sh(edge, "ip", "-6", "route", "add", "2001:db8::/32", "via", CLIENT_LINK_V6)
        docroot = tmp_path / "root"
        web.write_docroot(docroot, web.catalogue())
        yield WebLab(edge, client, docroot, tmp_path / "edge")


@pytest.fixture
def edge_web(weblab: WebLab) -> Iterator[web.EdgeWeb]:
    server = web.EdgeWeb(weblab.edge, weblab.workdir, weblab.docroot, PORT)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        assert server.pids() == []
        assert not sh("ip", "netns", "pids", weblab.edge, check=False).split()


FETCH = """
import http.client, json, sys
port, jobs = int(sys.argv[1]), json.loads(sys.argv[2])
out = []
for edge, source, uri in jobs:
    conn = http.client.HTTPConnection(edge, port, timeout=10, source_address=(source, 0))
    conn.request("GET", uri)
    resp = conn.getresponse()
    out.append([edge, source, uri, resp.status, len(resp.read())])
    conn.close()
print(json.dumps(out))
"""


def _fetch(lab: WebLab, jobs: list[tuple[str, str, str]]) -> list[list]:
    out = ns_sh(lab.client, sys.executable, "-c", FETCH, str(PORT), json.dumps(jobs), timeout=60)
    return json.loads(out)


def _log_lines(path: Path) -> list[re.Match[str]]:
    lines = path.read_text().splitlines()
    matches = [LOG_LINE.match(ln) for ln in lines]
    assert all(matches), [ln for ln, m in zip(lines, matches, strict=True) if not m]
    return [m for m in matches if m]


def test_nginx_serves_catalogue_both_families(weblab: WebLab, edge_web: web.EdgeWeb) -> None:
    objs = web.catalogue()
    # every object over both families, from rotating source addresses
    jobs = [(EDGE_V4, SOURCES_V4[i % len(SOURCES_V4)], o.uri) for i, o in enumerate(objs)]
    jobs += [(EDGE_V6, SOURCES_V6[i % len(SOURCES_V6)], o.uri) for i, o in enumerate(objs)]
    results = _fetch(weblab, jobs)
    size = {o.uri: o.size for o in objs}
    assert [r[3] for r in results] == [200] * len(jobs)
    assert [r[4] for r in results] == [size[r[2]] for r in results]
    assert {(r[2], ":" in r[0]) for r in results} == {(uri, v6) for uri in size for v6 in (False, True)}
    edge_web.stop()  # everything logged
    lines = _log_lines(edge_web.access_log)
    assert len(lines) == len(jobs)
    for m, (_, source, uri) in zip(lines, jobs, strict=True):
        assert m["addr"] == source  # plain addresses: IPv4 clients are not ::ffff:-mapped
        assert m["request"] == f"GET {uri} HTTP/1.1" and m["status"] == "200"
        assert int(m["body"]) == size[uri] and int(m["bytes_sent"]) > size[uri]
        assert abs(float(m["msec"]) - time.time()) < 120
    assert not edge_web.error_log.read_text().strip()


def test_reopen_logs_after_rename(weblab: WebLab, edge_web: web.EdgeWeb) -> None:
    uri = web.catalogue()[0].uri
    _fetch(weblab, [(EDGE_V4, SOURCES_V4[0], uri)])
    rotated = edge_web.access_log.with_suffix(".1")
    edge_web.access_log.rename(rotated)
    edge_web.reopen_logs()
    deadline = time.monotonic() + 5
    while not edge_web.access_log.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)  # the worker reopens after the master
    _fetch(weblab, [(EDGE_V6, SOURCES_V6[0], uri)])
    edge_web.stop()
    assert [m["addr"] for m in _log_lines(rotated)] == [SOURCES_V4[0]]
    assert [m["addr"] for m in _log_lines(edge_web.access_log)] == [SOURCES_V6[0]]


def test_start_failure_reports_nginx_message(weblab: WebLab, edge_web: web.EdgeWeb) -> None:
    second = web.EdgeWeb(weblab.edge, weblab.workdir.with_name("second"), weblab.docroot, PORT)
    try:
        with pytest.raises(web.TopologyError, match="Address already in use") as info:
            second.start()
        assert "\n" not in str(info.value)
    finally:
        second.stop()
    assert second.pids() == []
    assert len(edge_web.pids()) == 2  # the first one still runs


def test_load_process_requests_reach_the_log(weblab: WebLab, edge_web: web.EdgeWeb, tmp_path: Path) -> None:
    clients = [
        http_load.VirtualClient(SOURCES_V4[0], (EDGE_V4,)),
        http_load.VirtualClient(SOURCES_V6[0], (EDGE_V6,)),
        http_load.VirtualClient(SOURCES_V6[1], (EDGE_V6,)),
    ]
    cfg = http_load.LoadConfig(port=PORT, think=0.1, keepalive=3, max_active=2)
    load = http_load.HttpLoad(cfg, log_dir=tmp_path / "logs")
    try:
        load.start(weblab.client, clients, seed=7, name="t")
        time.sleep(3.5)
        assert load.exited() == 0
        [pid] = load.pids().values()
        proc = load.procs["t"]
        started = time.monotonic()
        load.stop(timeout=5)
        took = time.monotonic() - started
    finally:
        load.stop()
    assert took < 1.5, f"SIGTERM took {took:.2f}s"
    assert proc.returncode == 0  # ended by its own SIGTERM handler, not killed
    assert not os.path.exists(f"/proc/{pid}")
    stats = load.stats()["t"]
    assert int(stats["clients"]) == 3 and int(stats["errors"]) == 0 and int(stats["bad"]) == 0
    assert int(stats["requests"]) >= 10 and int(stats["ok"]) == int(stats["requests"])
    assert int(stats["connections"]) < int(stats["requests"])  # keep-alive
    edge_web.stop()
    lines = _log_lines(edge_web.access_log)
    size = {o.uri: o.size for o in web.catalogue()}
    assert {m["addr"] for m in lines} == {vc.addr for vc in clients}
    done = [m for m in lines if m["status"] == "200" and int(m["body"]) == size[m["request"].split()[1]]]
    # transfers cut by the stop are logged by nginx but not counted by the client
    assert int(stats["requests"]) <= len(lines) <= int(stats["requests"]) + len(clients)
    assert len(done) >= int(stats["requests"])
    assert sum(int(m["body"]) for m in done) >= int(stats["bytes"])
    assert max(int(m["conn_req"]) for m in lines) > 1


def test_load_with_min_size_asks_only_for_the_larger_objects(
    weblab: WebLab, edge_web: web.EdgeWeb, tmp_path: Path
) -> None:
    cfg = http_load.LoadConfig(port=PORT, think=0.05, keepalive=1, min_size=150 * 1024)
    load = http_load.HttpLoad(cfg, log_dir=tmp_path / "logs")
    try:
        load.start(weblab.client, [http_load.VirtualClient(SOURCES_V6[2], (EDGE_V6,))], seed=3, name="big")
        time.sleep(3.0)
    finally:
        load.stop()
    stats = load.stats()["big"]
    assert int(stats["requests"]) >= 3 and int(stats["ok"]) == int(stats["requests"]), stats
    edge_web.stop()
    sizes = [int(m["body"]) for m in _log_lines(edge_web.access_log) if m["addr"] == SOURCES_V6[2]]
    assert sizes and min(sizes) >= 150 * 1024, sizes


def test_objects_of_keeps_the_objects_of_at_least_min_size() -> None:
    everything = http_load.objects_of(http_load.LoadConfig())
    assert everything == web.catalogue()
    big = http_load.objects_of(http_load.LoadConfig(min_size=150 * 1024))
    assert big and all(o.size >= 150 * 1024 for o in big)
    assert {o.uri for o in big} == {o.uri for o in everything if o.size >= 150 * 1024}
    with pytest.raises(ValueError, match="no object"):
        http_load.objects_of(http_load.LoadConfig(min_size=10**12))


def test_load_stop_without_server_is_quick(weblab: WebLab, tmp_path: Path) -> None:
    """No nginx at all: connections are refused, errors are counted, SIGTERM still ends it."""
    cfg = http_load.LoadConfig(port=PORT, think=0.05)
    load = http_load.HttpLoad(cfg, log_dir=tmp_path / "logs")
    try:
        load.start(weblab.client, [http_load.VirtualClient(SOURCES_V6[2], (EDGE_V6,))], name="down")
        time.sleep(1.5)
        started = time.monotonic()
        load.stop()
        took = time.monotonic() - started
    finally:
        load.stop()
    assert took < 1.5
    stats = load.stats()["down"]
    assert int(stats["errors"]) >= 1 and int(stats["requests"]) == 0


def test_http_load_cli_rejects_bad_args() -> None:
    """The CLI refuses bad arguments with exit 2 before starting anything."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    for args in (
        [],
        ["--client", "198.51.100.2"],
        ["--client", "198.51.100.2=192.0.2.1", "--keepalive", "0"],
        ["--client", "198.51.100.2=192.0.2.1", "--min-size", str(10**12)],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "dyncc.lab.http_load", *args], capture_output=True, text=True, env=env
        )
        assert done.returncode == 2, args
        assert "error" in done.stderr
