"""Host health counters the edge agent attaches to every ApplyStatus.

Available memory (/proc/meminfo), load (/proc/loadavg), TCP sockets in use in
the agent's target namespace (/proc/net/sockstat{,6} read from a short-lived
thread that joined that namespace), the congestion controls the kernel offers,
and the number of owned routes.  Parsing is pure (`parse_*`); unreadable files
give zeros, never an exception.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from schemas.congestion_pb2 import HostHealth

T = TypeVar("T")
PROC = Path("/proc")


def parse_meminfo_available(text: str) -> int:
    """Bytes of MemAvailable from /proc/meminfo text (0 if absent)."""
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            fields = line.split()
            if len(fields) >= 2 and fields[1].isdigit():
                scale = 1024 if len(fields) > 2 and fields[2].lower() == "kb" else 1
                return int(fields[1]) * scale
    return 0


def parse_loadavg(text: str) -> tuple[float, float]:
    fields = text.split()
    try:
        return float(fields[0]), float(fields[1])
    except (IndexError, ValueError):
        return 0.0, 0.0


def parse_sockstat_tcp(text: str) -> int:
    """TCP sockets in use from sockstat (`TCP: inuse N`) or sockstat6 (`TCP6: inuse N`)."""
    total = 0
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] in ("TCP:", "TCP6:"):
            pairs = dict(zip(fields[1::2], fields[2::2], strict=False))
            value = pairs.get("inuse", "0")
            total += int(value) if value.isdigit() else 0
    return total


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def in_netns(netns: str | None, fn: Callable[[], T]) -> T:
    """Run `fn` in a thread that joined network namespace `netns` (None: here)."""
    if not netns:
        return fn()
    result: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            from pyroute2 import netns as pr_netns

            pr_netns.setns(netns, flags=0, fork=False)  # this thread only (CLONE_NEWNET)
            result.append(fn())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="dyncc-agent-netns", daemon=True)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


def tcp_sockets(netns: str | None) -> int:
    def count() -> int:
        base = PROC / "thread-self" / "net"
        return parse_sockstat_tcp(_read(base / "sockstat")) + parse_sockstat_tcp(_read(base / "sockstat6"))

    try:
        return in_netns(netns, count)
    except OSError:
        return 0


def available_congestion_controls() -> list[str]:
    return _read(PROC / "sys/net/ipv4/tcp_available_congestion_control").split()


def read_health(netns: str | None, owned_routes: int) -> HostHealth:
    load1, load5 = parse_loadavg(_read(PROC / "loadavg"))
    return HostHealth(
        mem_available_bytes=parse_meminfo_available(_read(PROC / "meminfo")),
        load1=load1,
        load5=load5,
        tcp_sockets=tcp_sockets(netns),
        available_congestion_controls=available_congestion_controls(),
        owned_routes=owned_routes,
    )
