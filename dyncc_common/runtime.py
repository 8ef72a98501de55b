"""Process plumbing shared by dyncc's long-running commands (edge and central).

- setup_logging: one format for every command.
- start_metrics: Prometheus HTTP endpoint on a port (0 = off), on loopback unless the
  component's metrics_address (METRICS_ADDRESS, --metrics-address) opens it.
- StopFlag: set by SIGTERM/SIGINT so loops can finish their cycle and flush.
"""

from __future__ import annotations

import signal
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from dyncc_common.errors import ConfigError
from dyncc_common.settings import STR, Setting

if TYPE_CHECKING:  # imported lazily: edge commands should start fast
    from prometheus_client import CollectorRegistry


def setup_logging(verbose: bool = False) -> None:
    import logging  # here: a one-shot collector forks its dump helper before loading logging

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


#: where the metrics endpoint listens unless metrics_address says otherwise: this host only
METRICS_LOOPBACK = "127.0.0.1"


def check_metrics_address(value: str, what: str) -> str:
    """An IP address to listen on (0.0.0.0 / :: = every interface), else a ConfigError."""
    import ipaddress  # here: only when an address is given

    try:
        return str(ipaddress.ip_address(value.strip().strip("[]")))
    except ValueError:
        raise ConfigError(f"bad {what} {value!r}: must be an IP address (0.0.0.0 listens everywhere)") from None


#: the row each component with a metrics_port has next to it (reuse(METRICS_ADDRESS))
METRICS_ADDRESS = Setting(
    METRICS_LOOPBACK,
    STR,
    "address the Prometheus metrics endpoint listens on (0.0.0.0 or :: opens it to the network)",
    validator=check_metrics_address,
    metavar="ADDR",
)


def start_metrics(port: int, registry: CollectorRegistry, addr: str = METRICS_LOOPBACK) -> None:
    """Serve `registry` on http://addr:port/metrics (loopback by default); port 0 disables the endpoint."""
    if port < 0 or port > 65535:
        raise ConfigError(f"bad metrics port {port}")
    if port == 0:
        return
    from prometheus_client import start_http_server

    try:
        start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        raise ConfigError(f"cannot serve metrics on {addr}:{port}: {exc.strerror or exc}") from exc


class StopFlag:
    """A threading.Event set by SIGTERM/SIGINT (when installed in the main thread)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal_name = ""

    def is_set(self) -> bool:
        return self.event.is_set()

    def set(self, reason: str = "stop") -> None:
        self.signal_name = reason
        self.event.set()

    def wait(self, timeout: float) -> bool:
        return self.event.wait(timeout)

    def _handler(self, signum: int, frame: types.FrameType | None) -> None:
        self.set(signal.Signals(signum).name)

    @contextmanager
    def installed(self) -> Iterator[StopFlag]:
        """Install SIGTERM/SIGINT handlers for the duration of the block (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        old_term = signal.signal(signal.SIGTERM, self._handler)
        old_int = signal.signal(signal.SIGINT, self._handler)
        try:
            yield self
        finally:
            signal.signal(signal.SIGTERM, old_term)
            signal.signal(signal.SIGINT, old_int)
