"""The offsets of `dyncc ingest`'s Kafka loader: asynchronous commits and the lag gauge.

OffsetCommits is a mixin of KafkaLoader (controller/ingest/kafka.py), which owns the state it
uses (declared below) and calls it from the main thread only.
* A commit sends the loaded offsets not committed yet (`pending`); it never blocks.
  Commits are asynchronous (librdkafka's commit(asynchronous=True)), sent from
  the main thread, one at a time; the answer comes through on_commit while the
  main thread polls.  Nothing waits for it: a synchronous commit waits without a
  bound, and after a broker's graceful stop that answer may never come (the main
  thread, blocked there, would neither poll, rejoin nor stop).  A commit not
  answered within `commit_timeout` (10 s) is given up and sent again.  At exit
  the loader polls for the last answer for at most commit_timeout.
* Lag (the gauge per assigned partition; --drain's test) = high watermark - committed offset
  (the low watermark when the group committed nothing): messages consumed but not yet loaded.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from controller.ingest.kafka_config import KafkaConfig, Key, error_text
from controller.ingest.metrics import IngestMetrics
from dyncc_common.kafka_log import KafkaLog


class OffsetCommits:
    """Commit and lag methods of KafkaLoader; the attributes are KafkaLoader's (set in its __init__)."""

    cfg: KafkaConfig
    consumer: Any
    metrics: IngestMetrics
    kafka_log: KafkaLog
    ever_assigned: bool
    # the group's committed offset per assigned partition (as far as known); loaded offsets whose
    # commit is not done yet; the commit in flight (its offsets, when it was sent); answers since
    # the last flush line
    committed_offsets: dict[Key, int]
    pending: dict[Key, int]
    commit_inflight: dict[Key, int]
    commit_sent_at: float
    acked: dict[Key, int]
    commit_backoff: float
    next_commit_retry: float
    _next_lag: float
    _no_commit: bool

    def _commit_pending(self) -> bool:
        """Send the loaded offsets not committed yet as an asynchronous commit (never blocks).

        True when nothing is left to commit.  One commit is in flight at a time; its answer comes
        through _on_commit (served by poll()/consume() on the main thread).  A commit not answered
        within commit_timeout is given up, counted, and sent again after the backoff."""
        from confluent_kafka import KafkaException, TopicPartition

        if not self.pending:
            return True
        if self._no_commit:  # partitions lost: the group would refuse (or wait for a coordinator)
            return False
        now = time.monotonic()
        if self.commit_sent_at:
            if now - self.commit_sent_at < self.cfg.commit_timeout:
                return False  # the last one is not answered yet: do not pile up more
            self._forget_commit()
            self._commit_failed(TimeoutError(f"no answer within {self.cfg.commit_timeout:g}s"))
            return False
        if now < self.next_commit_retry:
            return False
        offsets = [TopicPartition(t, p, o) for (t, p), o in sorted(self.pending.items())]
        try:
            self.consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as exc:
            self._commit_failed(exc)
            return False
        self.commit_inflight = dict(self.pending)
        self.commit_sent_at = now
        return False

    def _on_commit(self, err: Any, partitions: list[Any]) -> None:
        """librdkafka's answer to an asynchronous commit (main thread, inside poll/consume/close)."""
        from confluent_kafka import KafkaException

        failed: Any = err
        for tp in partitions or []:
            key = (tp.topic, tp.partition)
            if self.commit_inflight.get(key) == tp.offset:
                del self.commit_inflight[key]
            if err is not None or tp.error is not None:
                failed = failed or tp.error
                continue
            if tp.offset < 0:
                continue
            known = self.committed_offsets.get(key)
            self.committed_offsets[key] = tp.offset if known is None else max(known, tp.offset)
            if key in self.pending and self.pending[key] <= tp.offset:
                del self.pending[key]
            self.acked[key] = max(self.acked.get(key, -1), tp.offset)
        if not self.commit_inflight:
            self.commit_sent_at = 0.0
        if failed is not None:
            self._forget_commit()
            self._commit_failed(KafkaException(failed))
        else:
            self.commit_backoff = self.cfg.backoff_initial
            self.next_commit_retry = 0.0

    def _forget_commit(self) -> None:
        self.commit_inflight = {}
        self.commit_sent_at = 0.0

    def _commit_failed(self, exc: Exception) -> None:
        self._kafka_error("commit", exc)
        self.next_commit_retry = time.monotonic() + self.commit_backoff
        self.commit_backoff = min(self.commit_backoff * 2, self.cfg.backoff_max)

    def _commit_final(self) -> bool:
        """At exit: send what is pending and poll for the answer, for at most commit_timeout.

        The assigned partitions are paused first: the polls deliver no message (what is not
        committed is redelivered and deduplicated)."""
        from confluent_kafka import KafkaException

        with contextlib.suppress(KafkaException, RuntimeError):
            self.consumer.pause(self.consumer.assignment())
        deadline = time.monotonic() + self.cfg.commit_timeout
        sent = 0
        while self.pending and time.monotonic() < deadline:
            if not self.commit_sent_at:
                if sent >= 2:
                    break  # refused twice: the broker is away, a redelivery is deduplicated
                sent += 1
                self.next_commit_retry = 0.0
                self._commit_pending()
                if not self.commit_sent_at:
                    break
            try:
                self.consumer.poll(0.2)  # serves on_commit
            except (KafkaException, RuntimeError):
                break
        return not self.pending

    def _kafka_error(self, op: str, exc: Exception) -> None:
        """A failed Kafka request outside the message flow: counted, logged (rate-limited), retried later."""
        self.metrics.kafka_errors.labels(op).inc()
        self.kafka_log.note(logging.WARNING, f"{op} failed", f"kafka {op} failed (retrying): {error_text(exc)}")

    # ------------------------------------------------------------ lag

    def _lags(self) -> dict[Key, int]:
        """high watermark - committed offset per assigned partition (those the broker did not answer for left out)."""
        from confluent_kafka import KafkaException, TopicPartition

        c = self.consumer
        keys = [(tp.topic, tp.partition) for tp in c.assignment()]
        unknown = [key for key in keys if key not in self.committed_offsets]
        if unknown:
            try:
                got = c.committed([TopicPartition(t, p) for t, p in unknown], timeout=self.cfg.kafka_timeout)
            except KafkaException as exc:
                self._kafka_error("committed", exc)
                got = []
            for tp in got:
                if tp.error is None:
                    self.committed_offsets[(tp.topic, tp.partition)] = tp.offset
        out: dict[Key, int] = {}
        for key in keys:
            committed = self.committed_offsets.get(key)
            if committed is None:
                continue
            try:
                low, high = c.get_watermark_offsets(TopicPartition(*key), timeout=self.cfg.kafka_timeout, cached=False)
            except KafkaException as exc:
                self._kafka_error("watermarks", exc)
                break  # the broker is away: keep the last values, ask again next time
            if low < 0 or high < 0:
                continue
            out[key] = max(high - max(committed, low), 0)
        return out

    def _update_lag(self) -> dict[Key, int]:
        self._next_lag = time.monotonic() + self.cfg.lag_interval
        lags = self._lags()
        for (topic, partition), lag in lags.items():
            self.metrics.lag.labels(topic, str(partition)).set(lag)
        return lags

    def _caught_up(self) -> bool:
        assignment = self.consumer.assignment()
        if not self.ever_assigned or not assignment or self.pending:
            return False
        lags = self._update_lag()
        return len(lags) == len(assignment) and all(v == 0 for v in lags.values())
