"""Where polls go: Kafka (confluent-kafka), length-delimited files, or JSON lines on stdout.

A poll reaches a sink as `begin_poll()`, `send(batch)` for each serialized
TcpInfoBatch as soon as the poller has it (so Kafka compresses and ships while
the dump is still running), then `end_poll()`; `send_poll(batches)` does all
three.  A sink is closed with a flush deadline; `close()` returns how many
batches could not be delivered.

Kafka: idempotent producer (acks=all, zstd at level 1 by default, linger).
Batches wait in a bounded in-memory queue until librdkafka accepts them; when
the queue would exceed its byte bound the oldest whole poll is dropped and
counted (if the poll being sent is the only one left, the rest of it is
dropped), so memory stays bounded during a long broker outage while nothing
accepted is lost.  Delivery failures are counted by the delivery callback.
librdkafka's log lines and errors and the delivery failures go through a
rate-limited KafkaLog (dyncc_common/kafka_log.py): during a broker outage about
one line per `log_interval`; with quiet=True (one-shot runs) none at all, and
last_error() gives the reason for the caller's single closing line.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from collector.telemetry import timeline
from collector.telemetry.metrics import CollectMetrics
from dyncc_common.kafka_log import KafkaLog
from schemas import framing

log = logging.getLogger("dyncc.collect")


class Sink(Protocol):
    def begin_poll(self) -> None: ...

    def send(self, data: bytes) -> None: ...

    def end_poll(self) -> None: ...

    def send_poll(self, batches: list[bytes]) -> None: ...

    def service(self, timeout: float = 0.0) -> None: ...

    def close(self, timeout: float) -> int: ...


# ------------------------------------------------------------------ kafka


class _PollSink:
    """send_poll() in terms of begin_poll() / send() / end_poll()."""

    def begin_poll(self) -> None:
        pass

    def send(self, data: bytes) -> None:
        raise NotImplementedError

    def end_poll(self) -> None:
        pass

    def send_poll(self, batches: list[bytes]) -> None:
        self.begin_poll()
        for data in batches:
            self.send(data)
        self.end_poll()


@dataclass
class _QueuedPoll:
    batches: list[bytes]
    next: int = 0
    dropped: bool = False

    def remaining_bytes(self) -> int:
        return sum(len(b) for b in self.batches[self.next :])


class KafkaStart:
    """A Kafka producer for a KafkaSink (its settings, key and log), or why it could not be made.

    A one-shot run creates it before importing numpy, so that librdkafka loads
    and connects (in its own threads) while the rest of the collector loads;
    the sink raises `error` (bad settings, no librdkafka) when it is built on it.
    """

    def __init__(
        self,
        brokers: str,
        key: str,
        *,
        linger_ms: int = 50,
        message_timeout_ms: int = 300_000,
        extra: dict[str, Any] | None = None,
        quiet: bool = False,
        log_interval: float = 10.0,
    ) -> None:
        self.brokers = brokers
        self.key = key
        self.kafka_log = KafkaLog(logging.getLogger("dyncc.kafka"), interval=log_interval, quiet=quiet)
        conf: dict[str, Any] = {
            "bootstrap.servers": brokers,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": "zstd",
            "compression.level": 1,  # faster than the default 3 for a few % more bytes (docs/performance.md)
            "linger.ms": linger_ms,
            "message.timeout.ms": message_timeout_ms,
            "message.max.bytes": 8 << 20,
            "queue.buffering.max.kbytes": 64 << 10,  # >= one 100k-socket poll (~43 MB), or produce() blocks
            "queue.buffering.max.messages": 100_000,
            "client.id": f"dyncc-collect-{key}",
            # librdkafka's own messages and errors go through a rate-limited logger (served by
            # poll()), not raw stderr: a broker outage is about one line per log_interval
            "logger": self.kafka_log,
            "error_cb": self.kafka_log.error,
        }
        conf.update(extra or {})
        self.producer: Any = None
        self.error: Exception | None = None
        self._asker: threading.Thread | None = None
        self._answered = False
        try:
            from collector.telemetry.kafka_producer import producer_class

            self.producer = producer_class()(conf)
        except Exception as exc:  # confluent_kafka.KafkaException on bad settings, ImportError
            self.error = exc

    def ask_metadata(self, topic: str, timeout: float = 0.5) -> None:
        """Send one metadata request for `topic` now, from a helper thread, so that the start
        probe's answer arrives while the rest of the collector loads (a one-shot run).

        Only its success counts (`answered()`); a failure leaves the probe to the caller's
        usual loop, which reads the reason from the log.  The thread calls nothing but
        list_topics (librdkafka is thread-safe; callbacks stay served by the main thread).
        """
        if self.producer is None or self._asker is not None:
            return
        producer = self.producer

        def ask() -> None:
            try:
                producer.list_topics(topic, timeout=timeout)
            except Exception:  # confluent_kafka.KafkaException: no answer in time
                return
            self._answered = True

        self._asker = threading.Thread(target=ask, name="dyncc-kafka-metadata", daemon=True)
        self._asker.start()

    def answered(self, wait: float = 0.0) -> bool:
        """True once the early metadata request (ask_metadata) has been answered (waits up to `wait` s)."""
        if wait > 0 and self._asker is not None:
            self._asker.join(wait)
        return self._answered


class KafkaSink(_PollSink):
    def __init__(
        self, start: KafkaStart, topic: str, metrics: CollectMetrics, *, queue_max_bytes: int = 64 << 20
    ) -> None:
        """A sink on `start`'s producer, keyed by its key; raises the producer's creation error."""
        if start.error is not None:
            raise start.error
        self.brokers = start.brokers
        self.start = start
        self.kafka_log = start.kafka_log
        self.producer = start.producer
        self.topic = topic
        self.key = start.key.encode()
        self.metrics = metrics
        self.queue: deque[_QueuedPoll] = deque()
        self.open: _QueuedPoll | None = None  # the poll being sent
        self.queue_bytes = 0
        self.queue_max_bytes = queue_max_bytes
        self.failures = 0
        self.delivered = 0
        self.in_flight = 0

    def _on_delivery(self, err: Any, msg: Any) -> None:
        self.in_flight -= 1
        if err is not None:
            self.failures += 1
            self.metrics.delivery_failures.inc()
            self.kafka_log.note(logging.WARNING, "delivery", f"kafka delivery failed: {err}")
        else:
            if not self.delivered:
                timeline.mark("first_ack")
            self.delivered += 1
            self.metrics.delivered.inc()

    def begin_poll(self) -> None:
        self.end_poll()
        self.open = _QueuedPoll([])
        self.queue.append(self.open)

    def end_poll(self) -> None:
        if self.open is not None:
            self.open = None
            self._pump()

    def send(self, data: bytes) -> None:
        if self.open is None:
            self.begin_poll()
        poll = self.open
        assert poll is not None
        if poll.dropped:
            self.metrics.dropped_batches.inc()
            return
        size = len(data)
        while self.queue and self.queue_bytes + size > self.queue_max_bytes:
            self._drop_oldest()
            if poll.dropped:
                self.metrics.dropped_batches.inc()
                return
        poll.batches.append(data)
        self.queue_bytes += size
        self._pump()

    def _drop_oldest(self) -> None:
        old = self.queue.popleft()
        lost = len(old.batches) - old.next
        self.queue_bytes -= old.remaining_bytes()
        old.dropped = True
        old.batches, old.next = [], 0
        self.metrics.dropped_polls.inc()
        self.metrics.dropped_batches.inc(lost)
        log.warning("send queue full: dropped the oldest poll (%d batches not sent)", lost)

    def _pump(self) -> None:
        produce = self.producer.produce
        while self.queue:
            head = self.queue[0]
            while head.next < len(head.batches):
                value = head.batches[head.next]
                try:
                    produce(self.topic, value=value, key=self.key, on_delivery=self._on_delivery)
                except BufferError:
                    self.producer.poll(0)
                    self._gauges()
                    return
                self.in_flight += 1
                head.batches[head.next] = b""
                head.next += 1
                self.queue_bytes -= len(value)
            if head is self.open:
                break  # more of it is coming
            self.queue.popleft()
        self.producer.poll(0)
        self._gauges()

    def _gauges(self) -> None:
        self.metrics.queue_depth.set(sum(len(p.batches) - p.next for p in self.queue) + self.in_flight)
        self.metrics.queue_bytes.set(self.queue_bytes)

    def service(self, timeout: float = 0.0) -> None:
        self._pump()
        self.producer.poll(timeout)
        self.kafka_log.tick()

    def close(self, timeout: float) -> int:
        """Hand over everything queued and wait for delivery; returns batches not delivered."""
        self.end_poll()
        deadline = time.monotonic() + timeout
        while self.queue and time.monotonic() < deadline:
            self._pump()
            self.producer.poll(0.05)
        timeline.mark("handed_over")
        left = self.producer.flush(max(deadline - time.monotonic(), 0.0))
        unsent = sum(len(p.batches) - p.next for p in self.queue)
        self._gauges()
        self.kafka_log.flush()
        return int(left) + unsent + self.failures

    def last_error(self) -> str:
        """Why delivery failed, for the caller's closing error line."""
        return f"Kafka {self.brokers}: {self.kafka_log.last_error or 'not acknowledged in time'}"


# ------------------------------------------------------------------ file


class FileSink(_PollSink):
    """Length-delimited TcpInfoBatch records (schemas/framing.py: 4-byte big-endian length),
    rotated by size.

    PATH is the live file; on rotation PATH.1 .. PATH.<keep> shift up and PATH
    becomes PATH.1.  A batch is never split across files.
    """

    def __init__(self, path: str | Path, metrics: CollectMetrics, rotate_bytes: int = 256 << 20, keep: int = 5):
        self.path = Path(path)
        self.metrics = metrics
        self.rotate_bytes = rotate_bytes
        self.keep = keep
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh: IO[bytes] = open(self.path, "ab")  # noqa: SIM115 - kept open across polls
        self.size = self.fh.tell()

    def _rotate(self) -> None:
        self.fh.close()
        for k in range(self.keep - 1, 0, -1):
            src = self.path.with_name(f"{self.path.name}.{k}")
            if src.exists():
                os.replace(src, self.path.with_name(f"{self.path.name}.{k + 1}"))
        if self.keep >= 1:
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        else:
            self.path.unlink()
        self.fh = open(self.path, "ab")  # noqa: SIM115
        self.size = 0

    def send(self, data: bytes) -> None:
        head = framing.header(len(data))
        size = len(head) + len(data)
        if self.size and self.size + size > self.rotate_bytes:
            self._rotate()
        self.fh.write(head)
        self.fh.write(data)  # not joined with its length: that would copy every batch once more
        self.size += size
        self.metrics.delivered.inc()

    def end_poll(self) -> None:
        self.fh.flush()

    def service(self, timeout: float = 0.0) -> None:
        if timeout:
            time.sleep(timeout)

    def close(self, timeout: float) -> int:
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()
        return 0


# ------------------------------------------------------------------ stdout


class StdoutSink(_PollSink):
    """One JSON object per socket per line, for people (`| jq`)."""

    def __init__(self, metrics: CollectMetrics, write: Callable[[str], Any] | None = None) -> None:
        self.metrics = metrics
        self.write = write or sys.stdout.write

    def send(self, data: bytes) -> None:
        from collector.netlink.sockdiag import STATE_NAMES
        from schemas.addresses import format_addresses, format_prefixes
        from schemas.tcpinfo_columns import ADDRESS_COLUMNS
        from schemas.tcpinfo_decode import decode_batch

        b = decode_batch(data)
        self.metrics.delivered.inc()
        if not b.row_count:
            return
        cols = b.columns
        src = format_addresses(cols["src_addr"])
        dst = format_addresses(cols["dst_addr"])
        prefix = format_prefixes(cols["client_prefix"], cols["client_prefix_len"])
        cc = b.cc()
        plain = {k: v.tolist() for k, v in cols.items() if k not in ADDRESS_COLUMNS}
        lines = []
        for i in range(b.row_count):
            row: dict[str, Any] = {
                "host": b.host,
                "netns": b.netns,
                "time_ns": b.poll_start_ns,
                "src": src[i],
                "dst": dst[i],
                "prefix": prefix[i],
                "cc": cc[i],
                "state_name": STATE_NAMES.get(int(plain["state"][i]), "?"),
            }
            for k, v in plain.items():
                if k not in ("cc_index", "client_prefix_len"):
                    row[k] = v[i]
            lines.append(json.dumps(row, separators=(",", ":")))
        self.write("\n".join(lines) + "\n")

    def end_poll(self) -> None:
        if hasattr(sys.stdout, "flush"):
            sys.stdout.flush()

    def service(self, timeout: float = 0.0) -> None:
        if timeout:
            time.sleep(timeout)

    def close(self, timeout: float) -> int:
        return 0
