"""The delay relay's pure parts (map, map file) and its process life cycle (no traffic here)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import statistics
import struct
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dyncc.lab import delay
from dyncc.lab.delay import DelayError, DelayMap, DelayRelay
from tests.support.lab_util import map_text
from tests.support.netns_util import namespaces, new_ns_name, require_root


def _v4(src: str) -> bytes:
    return bytes([0x45, 0, 0, 20]) + bytes(8) + ipaddress.IPv4Address(src).packed + bytes(4)


def _v6(src: str) -> bytes:
    return bytes([0x60]) + bytes(7) + ipaddress.IPv6Address(src).packed + bytes(16)


def test_map_longest_prefix_and_default():
    m = DelayMap(
        {"198.51.100.0/24": 30, "2001:db8:101:100::/56": 40, "2001:db8:101::/48": 10, "2001:db8:101:200::/56": 0},
        default_ms=5,
    )
    assert m.size == 4
    assert m.delay(_v4("198.51.100.77")) == pytest.approx(0.030)
    assert m.delay(_v4("203.0.113.1")) == pytest.approx(0.005)
    assert m.delay(_v6("2001:db8:101:1ff::9")) == pytest.approx(0.040)  # /56 beats the /48
    assert m.delay(_v6("2001:db8:101:9900::1")) == pytest.approx(0.010)
    assert m.delay(_v6("2001:db8:101:200::2")) == 0.0  # zero-delay prefix, not the default
    assert m.delay(_v6("2001:db8:ffff::1")) == pytest.approx(0.005)
    # malformed or non-IP input gets the default, never an exception
    for junk in (b"", b"\x45\x00", b"\x60" + bytes(10), b"\x00" * 40):
        assert m.delay(junk) == pytest.approx(0.005)


@pytest.mark.parametrize(
    "bad", [{"not-a-net": 1}, {"198.51.100.0/24": -1}, {"198.51.100.0/24": 10_001}, {"2001:db8::/129": 1}]
)
def test_map_rejects(bad):
    with pytest.raises(DelayError):
        DelayMap(bad)


def test_map_text_errors():
    assert delay.parse_map_text("# c\n\n198.51.100.0/24 30  # x\n2001:db8::/56 1.5\n") == {
        "198.51.100.0/24": 30.0,
        "2001:db8::/56": 1.5,
    }
    with pytest.raises(DelayError, match="line 1"):
        delay.parse_map_text("198.51.100.0/24\n")
    with pytest.raises(DelayError, match="line 2"):
        delay.parse_map_text("198.51.100.0/24 3\n2001:db8::/56 x\n")
    assert delay.parse_map_arg("198.51.100.0/24=12.5") == ("198.51.100.0/24", 12.5)
    for bad in ("198.51.100.0/24", "198.51.100.0/24=x"):
        with pytest.raises(DelayError):
            delay.parse_map_arg(bad)


_nets = st.one_of(
    st.builds(
        lambda a, n: str(ipaddress.IPv4Network((a, n), strict=False)), st.integers(0, 2**32 - 1), st.integers(8, 32)
    ),
    st.builds(
        lambda a, n: str(ipaddress.IPv6Network((a, n), strict=False)), st.integers(0, 2**128 - 1), st.integers(16, 128)
    ),
)


@given(st.dictionaries(_nets, st.floats(0, 10_000, allow_nan=False).map(lambda x: round(x, 3)), max_size=20))
def test_map_text_round_trip(mapping):
    assert delay.parse_map_text(map_text(mapping)) == mapping


@given(st.text(max_size=200))
def test_map_text_never_crashes(text):
    with contextlib.suppress(DelayError):
        delay.parse_map_text(text)


def test_relay_queue_bound_and_release_order():
    """The Relay object on a pipe-like fd pair: holds, orders by due time, drops beyond max_queue."""
    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    try:
        relay = delay.Relay(wfd, DelayMap({"198.51.100.0/24": 50, "203.0.113.0/24": 10}), max_queue=2)
        relay.fd = rfd  # reads come from the pipe's read end ...
        os.write(wfd, _v4("198.51.100.1"))
        relay.read_ready(100.0)
        assert len(relay.held) == 1 and relay.held[0][0] == pytest.approx(100.05)
        relay.held.append((100.01, 99, b"x"))
        relay.held.sort()
        os.write(wfd, _v4("203.0.113.1"))
        relay.read_ready(100.0)
        assert relay.stats.dropped == 1 and relay.stats.packets == 2
        written: list[bytes] = []
        relay.write = written.append  # type: ignore[method-assign,assignment]
        relay.release(100.02)
        assert written == [b"x"]
        relay.release(100.06)
        assert written == [b"x", _v4("198.51.100.1")] and not relay.held
    finally:
        os.close(rfd)
        os.close(wfd)


def test_uplink_phases_alternate_repeatably_with_their_mean_lengths():
    up = delay.Uplink(busy_ms=400.0, quiet_s=3.0, busy_s=2.0)
    a, b = delay.UplinkSchedule(up, seed=7, start=0.0), delay.UplinkSchedule(up, seed=7, start=0.0)
    other = delay.UplinkSchedule(up, seed=8, start=0.0)
    times = [i * 0.01 for i in range(400_000)]  # 4000 s
    extras = [a.extra(t) for t in times]
    assert extras == [b.extra(t) for t in times]  # the same seed: the same phases
    assert extras != [other.extra(t) for t in times]
    assert set(extras) == {0.0, 0.4}
    busy_share = extras.count(0.4) / len(extras)
    assert busy_share == pytest.approx(2.0 / 5.0, abs=0.05)  # busy / (busy + quiet)
    phases, t = [], 0.0  # walk the phases of a fresh schedule at their boundaries
    walk = delay.UplinkSchedule(up, seed=7, start=0.0)
    walk.extra(t)
    for _ in range(2000):
        phases.append((walk.busy, walk.until - t))
        t = walk.until
        assert walk.extra(t) == (0.4 if not phases[-1][0] else 0.0)  # each boundary flips the phase
    busy_runs = [d for busy, d in phases if busy]
    quiet_runs = [d for busy, d in phases if not busy]
    assert min(busy_runs) >= 1.0 and max(busy_runs) <= 3.0  # uniform in 0.5..1.5 x 2 s
    assert statistics.mean(busy_runs) == pytest.approx(2.0, rel=0.05)
    assert statistics.mean(quiet_runs) == pytest.approx(3.0, rel=0.1)  # exponential, mean 3 s


def test_uplink_arguments():
    assert delay.parse_uplink_arg("2001:db8:101:300::/56=400/3/2") == ("2001:db8:101:300::/56", delay.Uplink(400, 3, 2))
    assert delay.parse_uplink_arg("198.51.100.0/24=" + delay.Uplink(250, 1.5, 0.5).text())[1] == delay.Uplink(
        250, 1.5, 0.5
    )
    for bad in ("198.51.100.0/24", "198.51.100.0/24=400/3", "198.51.100.0/24=x/3/2", "198.51.100.0/24=-1/3/2"):
        with pytest.raises(DelayError):
            delay.parse_uplink_arg(bad)
    with pytest.raises(DelayError, match=r"0\.05\.\.3600"):
        delay.Uplink(100, 0.0, 1.0)
    with pytest.raises(DelayError, match="uplink map"):
        delay.uplink_schedules({"nope": delay.Uplink(100, 1, 1)}, 0.0)


def test_relay_keeps_one_uplink_in_order_when_its_upload_ends():
    """A busy uplink is a FIFO: a packet that comes after the busy phase waits behind those in it."""
    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    try:
        uplinks = delay.uplink_schedules({"198.51.100.0/24": delay.Uplink(400, 3, 2)}, start=0.0)
        sched = uplinks.lookup(_v4("198.51.100.9"))
        assert isinstance(sched, delay.UplinkSchedule)
        sched.busy, sched.until = True, 100.1  # busy until t = 100.1, then quiet
        relay = delay.Relay(wfd, DelayMap({"198.51.100.0/24": 30, "203.0.113.0/24": 30}), 100, uplinks=uplinks)
        relay.fd = rfd
        for t, src in ((100.0, "198.51.100.1"), (100.2, "198.51.100.2"), (100.2, "203.0.113.1")):
            os.write(wfd, _v4(src))
            relay.read_ready(t)
        due = {pkt: t for t, _, pkt in relay.held}
        assert due[_v4("198.51.100.1")] == pytest.approx(100.43)  # 30 ms + 400 ms in the busy uplink
        assert due[_v4("198.51.100.2")] == pytest.approx(100.43)  # quiet now, but behind the first: not before it
        assert due[_v4("203.0.113.1")] == pytest.approx(100.23)  # another source: its own delay only
        os.write(wfd, _v4("198.51.100.3"))
        relay.read_ready(101.0)
        assert max(t for t, _, _ in relay.held) == pytest.approx(101.03)  # the queue has drained
    finally:
        os.close(rfd)
        os.close(wfd)


def test_bad_arguments_exit_2():
    run = subprocess.run(
        [sys.executable, "-m", "dyncc.lab.delay", "--dev", "x" * 20, "--map", "198.51.100.0/24=5"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 2 and "bad tun device name" in run.stderr


@pytest.mark.netns
def test_relay_process_starts_and_stops_cleanly(tmp_path):
    require_root()
    if not shutil.which("ip") or not os.path.exists(delay.TUN_PATH):
        pytest.skip("needs iproute2 and /dev/net/tun")
    ns = new_ns_name("hpa-td")
    with namespaces([ns]):
        subprocess.run(["ip", "-n", ns, "tuntap", "add", "dev", "dlytun", "mode", "tun"], check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "dev", "dlytun", "up"], check=True)
        relay = DelayRelay()
        with pytest.raises(DelayError, match="did not start"):
            relay.start(ns, "nosuchtun", {"198.51.100.0/24": 5}, log_path=tmp_path / "bad.log", ready_timeout=3)
        assert relay.proc is None
        relay.start(ns, "dlytun", {"198.51.100.0/24": 5}, log_path=tmp_path / "relay.log")
        try:
            assert relay.running()
            pid = relay.proc.pid if relay.proc else 0
            relay.reload()  # no map file: keeps running
        finally:
            code = relay.stop()
        assert code == 0
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        text = (tmp_path / "relay.log").read_text()
        assert "stopped" in text and "0 dropped" in text
        assert "no device nosuchtun" in (tmp_path / "bad.log").read_text()


def test_struct_layout_of_ifreq():
    # struct ifreq is 40 bytes on Linux: the name (16) and a union whose first member is the flags
    assert struct.calcsize("16sH22x") == 40
