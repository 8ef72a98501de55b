"""The lab's delay source: a relay that holds packets read from a tun device, then writes them back.

This kernel has no netem, so the router delays one direction of a path in user space.
Policy routing (paths.delay_commands) sends everything that arrives from a delayed client
link into the tun device: the client -> edge direction (requests and ACKs, a low packet
rate).  The relay reads each packet, looks up its source address in a map of networks
(longest prefix wins) to a delay, holds it that long, and writes it back into the tun
device.  A packet written back arrives with iif = the tun device, so it follows the main
table to the edge.  The delay adds to the round-trip time of every connection from that
source; a source outside the map gets `default_ms`.

A source network may also have an *uplink* (`--uplink NETWORK=BUSY_MS/QUIET_S/BUSY_S`): the
client's upstream link of a bloated access network, whose queue fills while the client uploads.
Its busy and quiet phases alternate (quiet: exponential with mean QUIET_S; busy: uniform in
0.5..1.5 x BUSY_S; drawn from a generator seeded by the network, so a run is repeatable); in a
busy phase a packet from that network waits BUSY_MS more, and packets of one uplink leave in the
order they came (a FIFO: when an upload ends, what queued behind it leaves together once the
upload's bytes have drained).  The requests and ACKs of downloads from that network then see
their delay jump by BUSY_MS for a while, as behind a real upstream queue.

The queue is bounded (`max_queue` packets): a packet that would exceed it is dropped and
counted, and drops are logged at most every 5 s.  SIGTERM or SIGINT ends the relay (held
packets are discarded and counted in the exit line); SIGHUP re-reads the map file.

Run inside the router namespace (stdlib only, starts fast), after the tun device exists:
    python -m dyncc.lab.delay --dev dlytun --map 2001:db8:101:300::/56=40 [--map-file F]
        [--uplink 2001:db8:101:300::/56=300/4/2]
Map file lines: `<network> <milliseconds>`; `#` starts a comment.
`DelayRelay` starts and stops that process for the lab.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import heapq
import ipaddress
import logging
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from dyncc_common.errors import DynccError

log = logging.getLogger("dyncc.lab.delay")

TUN_PATH = "/dev/net/tun"
TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
MAX_PACKET = 65536
READ_BURST = 256  # packets read per wake-up before releasing due ones
TICK = 0.001  # least time between wake-ups while packets are held
DROP_LOG_EVERY = 5.0
MAX_DELAY_MS = 10_000.0


class DelayError(DynccError):
    """The delay relay could not start (bad map, no tun device); str() is one line."""


# ------------------------------------------------------------------ the map (pure)


class PrefixTable:
    """Networks -> values; lookup by a packet's source address, longest prefix first."""

    def __init__(self, values: Mapping[str, object], what: str = "map") -> None:
        tables: dict[tuple[int, int], dict[int, object]] = {}
        for text, value in values.items():
            try:
                net = ipaddress.ip_network(text, strict=False)
            except ValueError as exc:
                raise DelayError(f"bad network {text!r} in the {what}") from exc
            shift = net.max_prefixlen - net.prefixlen
            key = int(net.network_address) >> shift
            tables.setdefault((net.version, shift), {})[key] = value
        # per family: (shift, table) with the longest prefix (smallest shift) first
        self._v4 = sorted(((s, t) for (v, s), t in tables.items() if v == 4), key=lambda x: x[0])
        self._v6 = sorted(((s, t) for (v, s), t in tables.items() if v == 6), key=lambda x: x[0])
        self.size = sum(len(t) for t in tables.values())

    def lookup(self, packet: bytes) -> object | None:
        """The value of the longest network holding `packet`'s source (an IP packet), or None."""
        if not packet:
            return None
        version = packet[0] >> 4
        if version == 4 and len(packet) >= 20:
            src = int.from_bytes(packet[12:16], "big")
            tables = self._v4
        elif version == 6 and len(packet) >= 40:
            src = int.from_bytes(packet[8:24], "big")
            tables = self._v6
        else:
            return None
        for shift, table in tables:
            hit = table.get(src >> shift)
            if hit is not None:
                return hit
        return None


class DelayMap:
    """Networks -> delay in seconds; lookup by a packet's source address, longest prefix first."""

    def __init__(self, delays_ms: Mapping[str, float], default_ms: float = 0.0) -> None:
        self.default = _check_ms(default_ms, "default") / 1000.0
        self._table = PrefixTable({net: _check_ms(ms, net) / 1000.0 for net, ms in delays_ms.items()}, "delay map")
        self.size = self._table.size

    def delay(self, packet: bytes) -> float:
        """Seconds to hold `packet` (an IPv4 or IPv6 packet without link header)."""
        hit = self._table.lookup(packet)
        return self.default if hit is None else float(hit)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Uplink:
    """A client uplink that is busy now and then: BUSY_MS more delay in a busy phase (module docstring)."""

    busy_ms: float
    quiet_s: float
    busy_s: float

    def __post_init__(self) -> None:
        _check_ms(self.busy_ms, "an uplink's busy phase")
        if not (0.05 <= self.quiet_s <= 3600 and 0.05 <= self.busy_s <= 3600):
            raise DelayError(f"uplink phases {self.quiet_s:g} s / {self.busy_s:g} s: each must be 0.05..3600 s")

    def text(self) -> str:
        return f"{self.busy_ms:g}/{self.quiet_s:g}/{self.busy_s:g}"


def parse_uplink_arg(item: str) -> tuple[str, Uplink]:
    """`NETWORK=BUSY_MS/QUIET_S/BUSY_S`."""
    net, sep, rest = item.partition("=")
    parts = rest.split("/")
    if not sep or len(parts) != 3:
        raise DelayError(f"--uplink {item!r}: expected NETWORK=BUSY_MS/QUIET_S/BUSY_S")
    try:
        values = [float(x) for x in parts]
    except ValueError as exc:
        raise DelayError(f"--uplink {item!r}: bad number") from exc
    return net, Uplink(*values)


class UplinkSchedule:
    """The busy and quiet phases of one uplink over time (seeded: the same phases every run)."""

    def __init__(self, uplink: Uplink, seed: int, start: float) -> None:
        self.uplink = uplink
        self._rng = random.Random(seed)
        self.busy = False
        self.until = start + self._rng.expovariate(1.0 / uplink.quiet_s)
        self.last_due = 0.0  # the latest release time given to a packet of this uplink (FIFO)

    def extra(self, now: float) -> float:
        """Seconds a packet arriving at `now` waits in the uplink's queue (times never go back)."""
        while now >= self.until:
            self.busy = not self.busy
            up, rng = self.uplink, self._rng
            self.until += rng.uniform(0.5, 1.5) * up.busy_s if self.busy else rng.expovariate(1 / up.quiet_s)
        return self.uplink.busy_ms / 1000.0 if self.busy else 0.0


def uplink_schedules(uplinks: Mapping[str, Uplink], start: float) -> PrefixTable:
    """Networks -> their UplinkSchedule (each seeded by its network's text)."""
    return PrefixTable(
        {net: UplinkSchedule(up, zlib.crc32(net.encode()), start) for net, up in uplinks.items()}, "uplink map"
    )


def _check_ms(ms: float, what: str) -> float:
    if not 0.0 <= ms <= MAX_DELAY_MS:
        raise DelayError(f"delay {ms} ms for {what}: must be 0..{MAX_DELAY_MS:g} ms")
    return float(ms)


def parse_map_text(text: str) -> dict[str, float]:
    """`<network> <ms>` per line (blank lines and `#` comments allowed)."""
    out: dict[str, float] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2:
            raise DelayError(f"delay map line {n}: expected '<network> <ms>', got {raw.strip()!r}")
        try:
            out[parts[0]] = float(parts[1])
        except ValueError as exc:
            raise DelayError(f"delay map line {n}: bad milliseconds {parts[1]!r}") from exc
    return out


def parse_map_arg(item: str) -> tuple[str, float]:
    net, sep, ms = item.partition("=")
    if not sep:
        raise DelayError(f"--map {item!r}: expected NETWORK=MS")
    try:
        return net, float(ms)
    except ValueError as exc:
        raise DelayError(f"--map {item!r}: bad milliseconds") from exc


# ------------------------------------------------------------------ the relay


@dataclass
class RelayStats:
    packets: int = 0  # read from the tun device
    written: int = 0
    dropped: int = 0  # queue full
    write_errors: int = 0
    max_held: int = 0


def open_tun(dev: str) -> int:
    """Attach to the tun device `dev` (created beforehand, e.g. by `ip tuntap add`); non-blocking fd."""
    if not dev or len(dev) > 15:
        raise DelayError(f"bad tun device name {dev!r}")
    try:
        socket.if_nametoindex(dev)  # TUNSETIFF would create a missing device; it must exist already
    except OSError as exc:
        raise DelayError(f"no device {dev} in this namespace") from exc
    try:
        fd = os.open(TUN_PATH, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise DelayError(f"open {TUN_PATH}: {exc.strerror}") from exc
    ifr = struct.pack("16sH22x", dev.encode(), IFF_TUN | IFF_NO_PI)
    try:
        fcntl.ioctl(fd, TUNSETIFF, ifr)
    except OSError as exc:
        os.close(fd)
        raise DelayError(f"attach to tun device {dev}: {exc.strerror}") from exc
    return fd


class Relay:
    """Hold each packet read from `fd` for its delay, then write it back to `fd`."""

    def __init__(
        self, fd: int, delays: DelayMap, max_queue: int, tick: float = TICK, uplinks: PrefixTable | None = None
    ) -> None:
        if max_queue < 1:
            raise DelayError("max_queue must be at least 1")
        if not 0.0 <= tick <= 0.01:
            raise DelayError("tick must be 0..10 ms")
        self.fd = fd
        self.tick = tick
        self._last_wake = 0.0
        self.delays = delays
        self.uplinks = uplinks if uplinks is not None and uplinks.size else None
        self.max_queue = max_queue
        self.stats = RelayStats()
        self.held: list[tuple[float, int, bytes]] = []
        self._seq = 0
        self._logged_drops = 0
        self._last_drop_log = 0.0

    def read_ready(self, now: float) -> None:
        """Read what the device holds (at most READ_BURST packets) and queue or forward each."""
        for _ in range(READ_BURST):
            try:
                pkt = os.read(self.fd, MAX_PACKET)
            except BlockingIOError:
                return
            except OSError as exc:
                raise DelayError(f"read from the tun device: {exc.strerror}") from exc
            self.stats.packets += 1
            hold = self.delays.delay(pkt)
            up = self.uplinks.lookup(pkt) if self.uplinks is not None else None
            if up is not None:
                assert isinstance(up, UplinkSchedule)
                hold += up.extra(now)
            if hold <= 0.0 and up is None:
                self.write(pkt)
            elif len(self.held) >= self.max_queue:
                self.stats.dropped += 1
            else:
                due = now + hold
                if up is not None:  # one uplink is a FIFO
                    due = up.last_due = max(due, up.last_due)
                self._seq += 1
                heapq.heappush(self.held, (due, self._seq, pkt))
                if len(self.held) > self.stats.max_held:
                    self.stats.max_held = len(self.held)

    def write(self, pkt: bytes) -> None:
        try:
            os.write(self.fd, pkt)
            self.stats.written += 1
        except OSError:
            self.stats.write_errors += 1

    def release(self, now: float) -> None:
        held = self.held
        while held and held[0][0] <= now:
            self.write(heapq.heappop(held)[2])

    def step(self, wake_fds: Sequence[int], max_wait: float) -> list[int]:
        """Wait for packets or the next due time (at most `max_wait` s); returns the ready wake fds.

        While packets are held, wake-ups are at least `tick` apart (reads and releases are batched:
        a packet may wait up to one tick longer than its delay); an idle relay reads at once.
        """
        now = time.monotonic()
        early: list[int] = []
        gap = self._last_wake + self.tick - now
        if self.held and gap > 0:
            early, _, _ = select.select(list(wake_fds), [], [], gap)
            now = time.monotonic()
        wait = max_wait if not self.held else min(max(self.held[0][0] - now, 0.0), max_wait)
        if early:
            wait = 0.0
        ready, _, _ = select.select([self.fd, *wake_fds], [], [], wait)
        now = time.monotonic()
        self._last_wake = now
        if self.fd in ready:
            self.read_ready(now)
        self.release(time.monotonic())
        self._log_drops(now)
        return [fd for fd in ready if fd != self.fd] or early

    def _log_drops(self, now: float) -> None:
        if self.stats.dropped != self._logged_drops and now - self._last_drop_log >= DROP_LOG_EVERY:
            log.warning(
                "delay relay: queue full (%d packets), %d dropped so far",
                self.max_queue,
                self.stats.dropped,
            )
            self._logged_drops = self.stats.dropped
            self._last_drop_log = now


def run(
    dev: str,
    delays_ms: dict[str, float],
    map_file: Path | None,
    default_ms: float,
    max_queue: int,
    tick: float = TICK,
    uplinks: Mapping[str, Uplink] | None = None,
) -> int:
    def load() -> DelayMap:
        merged = dict(delays_ms)
        if map_file is not None:
            try:
                merged.update(parse_map_text(map_file.read_text()))
            except OSError as exc:
                raise DelayError(f"read {map_file}: {exc.strerror}") from exc
        return DelayMap(merged, default_ms)

    delays = load()
    fd = open_tun(dev)
    rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    flags = {"stop": False, "reload": False}

    def on_stop(*_: object) -> None:
        flags["stop"] = True

    def on_hup(*_: object) -> None:
        flags["reload"] = True

    signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGHUP, on_hup)
    schedules = uplink_schedules(uplinks or {}, time.monotonic())
    relay = Relay(fd, delays, max_queue, tick, schedules)
    log.info(
        "delay relay on %s: %d networks, %d uplinks, default %g ms, queue %d",
        dev,
        delays.size,
        schedules.size,
        default_ms,
        max_queue,
    )
    try:
        while not flags["stop"]:
            if relay.step([rfd], 0.5):
                with contextlib.suppress(BlockingIOError):
                    os.read(rfd, 512)
            if flags["reload"]:
                flags["reload"] = False
                try:
                    relay.delays = load()
                    log.info("delay relay: map reloaded, %d networks", relay.delays.size)
                except DelayError as exc:
                    log.error("delay relay: map not reloaded: %s", exc)
    finally:
        s = relay.stats
        log.info(
            "delay relay on %s stopped: %d packets, %d written, %d dropped (queue full), "
            "%d discarded at exit, %d write errors, at most %d held",
            dev,
            s.packets,
            s.written,
            s.dropped,
            len(relay.held),
            s.write_errors,
            s.max_held,
        )
        os.close(fd)
        os.close(rfd)
        os.close(wfd)
    return 0


# ------------------------------------------------------------------ process (lab side)


@dataclass
class DelayRelay:
    """The relay process of one lab router, inside its namespace (started with `start`, ended by `stop`)."""

    proc: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    def start(
        self,
        ns: str,
        dev: str,
        delays_ms: Mapping[str, float] | None = None,
        *,
        uplinks: Mapping[str, Uplink] | None = None,
        map_file: Path | None = None,
        default_ms: float = 0.0,
        max_queue: int = 20000,
        tick_ms: float = TICK * 1000,
        log_path: Path | None = None,
        ready_timeout: float = 5.0,
    ) -> None:
        """Start the relay in namespace `ns` on tun device `dev`; raises DelayError if it does not come up."""
        if self.proc is not None:
            raise DelayError("delay relay already started")
        cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "dyncc.lab.delay", "--dev", dev]
        cmd += ["--default-ms", f"{default_ms:g}", "--max-queue", str(max_queue), "--tick-ms", f"{tick_ms:g}"]
        for net, ms in (delays_ms or {}).items():
            cmd += ["--map", f"{net}={float(ms)!r}"]
        for net, up in (uplinks or {}).items():
            cmd += ["--uplink", f"{net}={up.text()}"]
        if map_file is not None:
            cmd += ["--map-file", str(map_file)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self._log = open(log_path, "ab") if log_path is not None else None  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log if self._log is not None else subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
        if not _wait_attached(ns, dev, self.proc, ready_timeout):
            code = self.proc.poll()
            self.stop()
            raise DelayError(f"delay relay on {ns}/{dev} did not start (exit code {code})")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def reload(self) -> None:
        """Re-read the map file (SIGHUP)."""
        if self.running():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGHUP)

    def stop(self, timeout: float = 3.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout`; returns the exit code (None if never started)."""
        proc, self.proc = self.proc, None
        code: int | None = None
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait(2)
        if self._log is not None:
            self._log.close()
            self._log = None
        return code


def _wait_attached(ns: str, dev: str, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """True once `dev` in `ns` has a reader (its carrier is up: a tun device without one has none)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        out = subprocess.run(
            ["ip", "-n", ns, "-o", "link", "show", "dev", dev], capture_output=True, text=True, timeout=5
        ).stdout
        if "NO-CARRIER" not in out and ",UP" in out:
            return True
        time.sleep(0.05)
    return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dyncc.lab.delay", description=__doc__.splitlines()[0])
    parser.add_argument("--dev", required=True, help="tun device to attach to (it must exist)")
    parser.add_argument("--map", action="append", default=[], metavar="NETWORK=MS", help="a source network's delay")
    parser.add_argument(
        "--uplink",
        action="append",
        default=[],
        metavar="NETWORK=BUSY_MS/QUIET_S/BUSY_S",
        help="a source network's busy uplink (module docstring)",
    )
    parser.add_argument("--map-file", type=Path, help="file of '<network> <ms>' lines, re-read on SIGHUP")
    parser.add_argument("--default-ms", type=float, default=0.0, help="delay of sources outside the map")
    parser.add_argument("--max-queue", type=int, default=20000, help="packets held at most (more are dropped)")
    parser.add_argument("--tick-ms", type=float, default=TICK * 1000, help="least time between wake-ups when busy")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    try:
        delays = dict(parse_map_arg(item) for item in args.map)
        uplinks = dict(parse_uplink_arg(item) for item in args.uplink)
        return run(args.dev, delays, args.map_file, args.default_ms, args.max_queue, args.tick_ms / 1000, uplinks)
    except DelayError as exc:
        print(f"delay relay: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
