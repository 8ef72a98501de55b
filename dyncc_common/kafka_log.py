"""librdkafka's log lines and errors through a rate limit: an outage costs about one line per interval.

A KafkaLog is handed to confluent-kafka as the `logger` setting (the client
calls its `log(level, fmt, *args)`) and its `error` method as `error_cb`;
callers send their own repetitive messages (failed deliveries, failed
commits) through `note(level, kind, text)`.

* A message of a kind not seen for `memory` seconds (default 6 intervals) is
  logged at once.  Kind: librdkafka's log facility (FAIL, ...), the error's
  name (_TRANSPORT, ...) or the caller's key.
* Repeats are only counted; once `interval` has passed since the first of
  them, the next message or `tick()` logs them as one summary line:
  "kafka: 412 repeated messages in the last 10 s (FAIL x206, _TRANSPORT x205,
  ...); last: ...".  A broker that stays away therefore costs one line per
  interval, however often librdkafka reconnects and whatever it reports
  (messages that recur less often than the interval are summed up too).
* quiet=True logs nothing at all (a one-shot command reports `last_error` in
  its own single line instead).
* `last_error`: the text of the latest message at WARNING or above.
* Authentication and TLS failures (dyncc_common.kafka_security.classify) are
  counted in `security_errors` (rate-limited like the rest: a client whose
  password was changed under it retries as for an outage); `security_failure()`
  gives the kind and text of the latest for a start probe's error line.
  `refused`: the latest connection attempt was refused (nothing listens).

The client serves its callbacks in poll()/consume() on the calling thread; a
lock makes concurrent use safe anyway.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from dyncc_common.kafka_security import classify


class KafkaLog:
    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval: float = 10.0,
        memory: float | None = None,
        quiet: bool = False,
        on_error: Callable[[Any], None] | None = None,
    ) -> None:
        self.logger = logger
        self.interval = interval
        self.memory = 6 * interval if memory is None else memory
        self.quiet = quiet
        self.on_error = on_error
        self.last_error = ""
        self.messages = 0  # messages it was given
        self.security_errors = 0  # authentication / TLS failures (kafka_security.classify)
        self.refused = False  # the latest connection attempt was refused
        self._security: tuple[str, str] = ("", "")  # (kind, text) of the latest
        self._protocol_hints = 0  # plaintext first requests dropped (a TLS listener?)
        self._lock = threading.Lock()
        self._last_seen: dict[str, float] = {}
        self._held: dict[str, int] = {}  # kind -> repeats not logged yet
        self._held_since = 0.0
        self._held_level = logging.DEBUG
        self._held_last = ""

    # ------------------------------------------------------------ confluent-kafka callbacks

    def log(self, level: int, fmt: str, *args: Any) -> None:
        """The `logger` interface confluent-kafka calls: log(level, "%s [%s] %s", fac, name, text)."""
        text = fmt % args if args else fmt
        kind = str(args[0]) if len(args) == 3 else text[:40]
        if classify("", text) == "protocol":  # only a log line says so (error_cb gets no error)
            with self._lock:
                self._protocol_hints += 1
                if self._protocol_hints >= 2:  # once may be a broker going away; twice is the listener
                    self.security_errors += 1
                    self._security = ("protocol", text)
        self.note(level, kind, text)

    def error(self, err: Any) -> None:
        """`error_cb`: a KafkaError from the client (broker down, all brokers down, ...)."""
        if self.on_error is not None:
            self.on_error(err)
        fatal = bool(err.fatal()) if hasattr(err, "fatal") else False
        name, text = str(err.name()), str(err.str())
        security = classify(name, text)
        with self._lock:
            if security in ("auth", "tls"):
                self.security_errors += 1
                self._security = (security, text)
            if name == "_TRANSPORT":
                self.refused = "Connection refused" in text
        self.note(logging.ERROR if fatal else logging.WARNING, str(err.name()), f"{err.name()}: {err.str()}")

    def security_failure(self) -> tuple[str, str]:
        """(kind, text) of the latest authentication / TLS failure; ("", "") if none."""
        with self._lock:
            return self._security

    # ------------------------------------------------------------ general

    def note(self, level: int, kind: str, text: str) -> None:
        """Log `text` now if nothing of `kind` was seen for `memory` seconds, else count it."""
        now = time.monotonic()
        with self._lock:
            self.messages += 1
            if level >= logging.WARNING:
                self.last_error = text
            seen = self._last_seen.get(kind)
            self._last_seen[kind] = now
            if len(self._last_seen) > 256:  # kinds are few; keep the table bounded anyway
                kept = {k: t for k, t in self._last_seen.items() if now - t < self.memory}
                self._last_seen = kept if len(kept) <= 128 else {kind: now}
            self._flush_held(now, force=False)
            if seen is not None and now - seen < self.memory:
                if not self._held:
                    self._held_since = now
                self._held[kind] = self._held.get(kind, 0) + 1
                self._held_level = max(self._held_level, level)
                self._held_last = text
                return
            self._emit(level, text)

    def tick(self) -> None:
        """Log the summary of held repeats once their interval is over (call it from a loop)."""
        with self._lock:
            self._flush_held(time.monotonic(), force=False)

    def flush(self) -> None:
        """Log the summary of held repeats now (before exiting)."""
        with self._lock:
            self._flush_held(time.monotonic(), force=True)

    def _flush_held(self, now: float, force: bool) -> None:
        if not self._held or (not force and now - self._held_since < self.interval):
            return
        total = sum(self._held.values())
        kinds = sorted(self._held.items(), key=lambda kv: -kv[1])
        shown = ", ".join(f"{k} x{n}" for k, n in kinds[:5]) + (", ..." if len(kinds) > 5 else "")
        self._emit(
            self._held_level,
            f"kafka: {total} repeated messages in the last {now - self._held_since:.0f} s ({shown}); "
            f"last: {self._held_last}",
        )
        self._held = {}
        self._held_level = logging.DEBUG

    def _emit(self, level: int, text: str) -> None:
        if self.quiet:
            return
        self.logger.log(level, "%s", text)
