"""The Kafka side of `dyncc ingest`: consumer group loop, flush policy, offsets, backoff.

* confluent-kafka consumer in group `--group`; several loaders share the
  topic's partitions.  enable.auto.commit is off: offsets are committed
  only after BatchWriter.flush() returned, i.e. after the store
  acknowledged every insert of the group.
* Messages are grouped per flush by rows / bytes / age limits: a group goes
  as soon as an insert thread is idle and min_rows wait (or max_wait passed;
  while another group is in flight, its share max_rows / (inserters + 1)),
  at the latest when max_rows / max_bytes are reached.  Up to `inserters`
  groups are inserted at once (worker threads, one ClickHouse connection
  each: the server runs one thread per INSERT; each thread sends its group
  slice by slice, one INSERT each, decoding a slice block by block as it
  sends it, BatchWriter) while the next is consumed and prepared.  Groups
  are settled and their offsets committed strictly in order: a group's
  offsets only once it and every group before it were acknowledged.
* Memory is bounded whatever the backlog: the loader consumes only while the
  messages it holds (buffered, or in groups in flight whose slices have not
  landed) are under max_rows rows and max_bytes bytes; librdkafka's prefetch
  queue is small (consumer_settings) and the rest waits in Kafka.
* Store unavailable: the flush is retried with capped exponential backoff;
  meanwhile the assigned partitions are paused and poll() keeps running, so
  the loader stays in the group (max.poll.interval.ms is never exceeded) and
  nothing is committed.  Groups in flight behind a failed one are waited for
  and retried with it (those that did land are found in the ledger and
  skipped).  After the flush succeeds consumption resumes.
* Broker unavailable: every Kafka error outside the message flow (commit,
  committed offsets, watermarks, metadata, the client's own connection
  errors) is caught, counted in dyncc_ingest_kafka_errors_total{op} and
  retried; the loader keeps running and resumes by itself.  A commit that
  fails is kept and retried (with backoff, and with the next flush's
  offsets); the rows are loaded either way and a redelivery is deduplicated.
  Commits (asynchronous, one in flight, given up after commit_timeout) and the lag:
  controller/ingest/kafka_offsets.py.
  librdkafka's log lines and errors, and repeated errors of the loader's own
  Kafka calls, go through dyncc_common.kafka_log.KafkaLog: about one line per
  `log_interval` during an outage.
* Housekeeping (lag gauge, commit retries, log summaries) runs from the
  main thread, the only one that touches the consumer, in every state:
  consuming, paused for a store outage, and while a store call blocks (the
  ledger look-ups of prepare() and the retried flushes run on worker threads
  for that; the main thread waits for them and does the housekeeping).
  Lag = high watermark - committed offset (the low watermark when the group
  committed nothing), so it counts messages consumed but not yet loaded.
* Start (wait_for_brokers), the consumer's settings, TLS / SASL: controller/ingest/kafka_config.py.
* Rebalance: before partitions are revoked the buffered group is flushed and
  committed (or, if the store is down, dropped uncommitted for the next owner).
  Partitions lost (the session timed out: the broker away, on_lost) are settled
  the same way but nothing is committed: the group no longer knows this member,
  and a commit would only wait for a coordinator; the next owner (usually this
  loader, once it rejoins) skips the loaded batches through the ledger.
* No partition: dyncc_ingest_assigned_partitions and dyncc_ingest_unassigned_seconds
  say how long the loader has held none.  Subscribed and holding nothing for
  `rejoin_after` (60 s) while a broker answers the topic's metadata, the loader
  closes its consumer (from the main thread: no other thread ever calls the consumer)
  and subscribes with a new one (dyncc_ingest_consumer_rejoins_total,
  one warning line): whatever state the client was left in by an outage, it joins the
  group again.  The wait doubles after each rejoin that brought nothing (a standby
  loader of a group with more loaders than partitions), up to 16 x, and is reset by an
  assignment.
* --drain: exit once every assigned partition has lag 0 (everything
  committed) after an idle poll.
* Fault injection for tests: DYNCC_INGEST_CRASH_AFTER_INSERT=1 makes the
  process send itself SIGKILL right after a flush succeeded and before its
  offsets are committed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any, TypeVar

from controller.ingest.kafka_config import DRAIN_PROBE_SECONDS as DRAIN_PROBE_SECONDS
from controller.ingest.kafka_config import KafkaConfig, Key, kafka_logger, offsets_text, partitions_text
from controller.ingest.kafka_config import consumer_settings as consumer_settings
from controller.ingest.kafka_config import start_probe as start_probe
from controller.ingest.kafka_config import wait_for_brokers as wait_for_brokers
from controller.ingest.kafka_offsets import OffsetCommits
from controller.ingest.writer import BatchWriter, FlushResult, Incoming, PreparedFlush
from controller.store import StoreError
from dyncc_common.kafka_log import KafkaLog
from dyncc_common.runtime import StopFlag

log = logging.getLogger("dyncc.ingest")

CRASH_ENV = "DYNCC_INGEST_CRASH_AFTER_INSERT"
T = TypeVar("T")


class KafkaLoader(OffsetCommits):
    def __init__(self, writer: BatchWriter, cfg: KafkaConfig, stop: StopFlag) -> None:
        from confluent_kafka import Consumer

        self.writer = writer
        self.cfg = cfg
        self.stop = stop
        self.metrics = writer.metrics
        self.kafka_log = KafkaLog(kafka_logger, interval=cfg.log_interval, on_error=self._client_error)
        self._consumer_class = Consumer
        self.consumer = self._new_consumer()
        self.buffer: list[Incoming] = []
        # groups being inserted, oldest first
        self.inflight: deque[tuple[list[Incoming], PreparedFlush, Future[FlushResult]]] = deque()
        self.inserters = max(1, cfg.inserters)
        self.pool = ThreadPoolExecutor(max_workers=self.inserters, thread_name_prefix="ingest-insert")
        # prepare() looks up the ledger in the store: the main thread waits for it here and keeps
        # doing the housekeeping meanwhile (a hung store must not freeze the lag gauge)
        self.prepare_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-prepare")
        self.buffer_rows = 0
        self.buffer_bytes = 0
        self.buffer_since = 0.0
        self.paused = False
        self.backoff = cfg.backoff_initial
        self.next_retry = 0.0
        self.assignment: list[Any] = []
        self.ever_assigned = False
        self.partitions_seen: set[tuple[str, int]] = set()
        # offsets: the group's committed offset per assigned partition (as far as known) and
        # loaded offsets whose commit failed and is retried
        self.committed_offsets: dict[Key, int] = {}
        self.pending: dict[Key, int] = {}
        self.commit_backoff = cfg.backoff_initial
        # the asynchronous commit librdkafka has not answered yet: its offsets, when it was sent
        self.commit_inflight: dict[Key, int] = {}
        self.commit_sent_at = 0.0
        self.acked: dict[Key, int] = {}  # commits answered since the last flush line
        self.next_commit_retry = 0.0
        self._next_lag = 0.0
        self._in_callback = False  # inside a rebalance callback: no housekeeping requests
        self._no_commit = False  # partitions lost: settle without committing
        # since when the loader holds no partition (monotonic; 0 while it holds one)
        self.unassigned_since = time.monotonic()
        self.rejoin_wait = cfg.rejoin_after
        self.first_message_at = 0.0  # wall clock, for the closing rate line
        self.last_flush_at = 0.0
        self.rows_loaded = 0
        self.waited = 0.0  # main thread time spent waiting for an insert thread
        self.crash_after_insert = os.environ.get(CRASH_ENV, "") not in ("", "0")

    # ------------------------------------------------------------ rebalance callbacks

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self.assignment = list(partitions)
        self.ever_assigned = True
        self.metrics.assigned.set(len(partitions))
        if partitions:
            self.unassigned_since = 0.0
            self.rejoin_wait = self.cfg.rejoin_after
            self.metrics.unassigned_seconds.set(0)
        for tp in partitions:
            self.committed_offsets.pop((tp.topic, tp.partition), None)  # read again from the group
        # a commit still unanswered was sent before this assignment (before an outage, say): its
        # answer may never come; what is pending goes again at once instead of after commit_timeout
        self._forget_commit()
        self.next_commit_retry = 0.0
        self.commit_backoff = self.cfg.backoff_initial
        self._next_lag = 0.0
        log.info("assigned %s", partitions_text(partitions))
        if self.paused and partitions:
            consumer.assign(partitions)
            consumer.pause(partitions)

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        """The session timed out (the broker away): settle the groups in flight, commit nothing."""
        log.warning("lost %s (group session timed out); rejoining", partitions_text(partitions))
        self._no_commit = True
        try:
            self._on_revoke(consumer, partitions, said=True)
        finally:
            self._no_commit = False

    def _on_revoke(self, consumer: Any, partitions: list[Any], said: bool = False) -> None:
        if not said:
            log.info("revoked %s", partitions_text(partitions))
        self._in_callback = True
        try:
            self._settle(final=True)
            if self.pending:
                self._commit_pending()
        finally:
            self._in_callback = False
        if self.buffer:
            log.warning("dropping %d uncommitted messages for the next owner", len(self.buffer))
            self._clear()
        for tp in partitions:
            key = (tp.topic, tp.partition)
            if self.pending.pop(key, None) is not None:
                log.warning("%s[%d]: commit not done; the next owner skips the loaded batches", *key)
            self.committed_offsets.pop(key, None)
            with contextlib.suppress(KeyError):
                self.metrics.lag.remove(tp.topic, str(tp.partition))
        self.assignment = []
        self.metrics.assigned.set(0)
        if not self.unassigned_since:
            self.unassigned_since = time.monotonic()
        if self.paused:
            self.paused = False
            self.metrics.paused.set(0)

    # ------------------------------------------------------------ main loop

    def run(self) -> int:
        self._subscribe()
        try:
            while not self.stop.is_set():
                self._housekeep()
                if self.unassigned_since and not self.buffer and not self.inflight:
                    self._check_rejoin()
                c = self.consumer  # a new one after a rejoin
                if self.paused:
                    m = c.poll(0.2)  # stays in the group; paused partitions deliver nothing
                    if m is not None:
                        self._take(m)
                    if time.monotonic() >= self.next_retry:
                        self._retry()
                    continue
                msgs: list[Any] = []
                if self._room():
                    msgs = c.consume(num_messages=self.cfg.poll_messages, timeout=0.2)
                    for m in msgs:
                        self._take(m)
                elif self.inflight:  # the loader holds its limit: wait for a slice to land
                    t_wait = time.monotonic()
                    wait_futures([f for _, _, f in self.inflight], timeout=0.05, return_when=FIRST_COMPLETED)
                    self.waited += time.monotonic() - t_wait
                self._reap(wait=False)
                now = time.monotonic()
                full = self.buffer_rows >= self.cfg.max_rows or self.buffer_bytes >= self.cfg.max_bytes
                # An insert thread idle and enough rows (or old enough) -> go now: groups grow
                # to whatever arrives during one insert, up to the limits.  Enough is min_rows
                # when nothing is being inserted, else a fair share of max_rows (the groups in
                # flight and the one being gathered share it, _room): small concurrent inserts
                # cost the server more per row.
                busy = len(self.inflight)
                ready = busy < self.inserters and (
                    self.buffer_rows >= self._enough()
                    or now - self.buffer_since >= self.cfg.max_wait
                    or (not msgs and self.cfg.drain)
                )
                if self.buffer and not self.paused and (full or ready):
                    self._submit()
                if (
                    self.cfg.drain
                    and not msgs
                    and not self.buffer
                    and not self.inflight
                    and not self.paused
                    and self._caught_up()
                ):
                    log.info("drained: lag 0 on %s", partitions_text(self.assignment))
                    return 0
            log.info("stopping (%s)", self.stop.signal_name or "stop")
            self._settle(final=True)
            return 0
        finally:
            self._settle(final=True)
            if self.pending and not self._commit_final():
                log.warning(
                    "offsets left uncommitted (%s); a redelivery will be deduplicated", offsets_text(self.pending)
                )
            self.pool.shutdown(wait=True)
            self.prepare_pool.shutdown(wait=True)
            if self.rows_loaded:
                span = max(self.last_flush_at - self.first_message_at, 1e-9)
                log.info(
                    "loaded %d rows in %.3f s (first message %.3f -> last flush %.3f): %.0f rows/s; "
                    "%.1f s waiting for inserts",
                    self.rows_loaded,
                    span,
                    self.first_message_at,
                    self.last_flush_at,
                    self.rows_loaded / span,
                    self.waited,
                )
            try:
                self.consumer.close()
            except Exception as exc:  # closing must not hide the real outcome
                log.warning("closing the consumer: %s", exc)
            self.kafka_log.flush()

    def _new_consumer(self) -> Any:
        settings = consumer_settings(self.cfg, self.kafka_log)
        settings["on_commit"] = self._on_commit  # served by poll()/consume() on the main thread
        return self._consumer_class(settings)

    def _subscribe(self) -> None:
        self.consumer.subscribe(
            [self.cfg.topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    def _check_rejoin(self) -> None:
        """Subscribed without a partition for rejoin_after (or longer after earlier rejoins) while a
        broker answers with the topic's partitions: close the consumer and subscribe with a new one."""
        from confluent_kafka import KafkaException

        held = time.monotonic() - self.unassigned_since
        if held < self.rejoin_wait:
            return
        try:
            md = self.consumer.list_topics(self.cfg.topic, timeout=self.cfg.kafka_timeout)
            topic = md.topics.get(self.cfg.topic)
            partitions = len(topic.partitions) if topic is not None and topic.error is None else 0
        except KafkaException as exc:
            self._kafka_error("metadata", exc)
            partitions = 0
        if not partitions:  # the broker away (or no such topic yet): a new consumer would not help
            self.unassigned_since = time.monotonic() - self.rejoin_wait + self.cfg.lag_interval
            return
        log.warning(
            "no partition for %.0f s while the broker answers (%s: %d partitions): closing the consumer "
            "and subscribing anew",
            held,
            self.cfg.topic,
            partitions,
        )
        self.metrics.rejoins.inc()
        try:  # the main thread is the only one that calls the consumer: nothing is inside it now
            self.consumer.close()
        except Exception as exc:  # a client left in a bad state: the new one takes over either way
            log.warning("closing the old consumer: %s", exc)
        self._forget_commit()  # the old consumer's answer (if any) is gone with it
        self.consumer = self._new_consumer()
        self._subscribe()
        self.unassigned_since = time.monotonic()
        self.rejoin_wait = min(self.rejoin_wait * 2, self.cfg.rejoin_after * 16)

    def _take(self, m: Any) -> None:
        err = m.error()
        if err is not None:
            self.metrics.kafka_errors.labels("consume").inc()
            self.kafka_log.note(logging.WARNING, f"consume {err.name()}", f"kafka: {err}")
            return
        value = m.value() or b""
        if not self.first_message_at:
            self.first_message_at = time.time()
        item = Incoming(value, m.topic(), m.partition(), m.offset())
        self.writer.prescan(item)
        if not self.buffer:
            self.buffer_since = time.monotonic()
        self.buffer.append(item)
        self.buffer_rows += item.rows
        self.buffer_bytes += len(value)
        self.partitions_seen.add((m.topic(), m.partition()))

    def _enough(self) -> int:
        """Rows that make a group when an insert thread is free: min_rows when nothing is in
        flight, else the group's share of max_rows (the groups in flight and the one gathered)."""
        return self.cfg.min_rows if not self.inflight else self.cfg.max_rows // (self.inserters + 1)

    def _room(self) -> bool:
        """Whether to consume more: the messages held (buffered, or in groups in flight and not
        landed yet) are under max_rows rows and max_bytes bytes, or an insert thread is free and
        its group is still short.  Bounds the loader's memory whatever the backlog (to about
        max_rows, at most inserters x max_rows + max_rows); librdkafka's small prefetch queue holds
        the rest."""
        if len(self.inflight) < self.inserters and self.buffer_rows < self._enough():
            return True
        rows, size = self.buffer_rows, self.buffer_bytes
        for items, _, _ in self.inflight:
            for item in items:
                if not item.landed:
                    rows += item.rows
                    size += len(item.value)
        return rows < self.cfg.max_rows and size < self.cfg.max_bytes

    def _clear(self) -> None:
        self.buffer = []
        self.buffer_rows = 0
        self.buffer_bytes = 0

    # ------------------------------------------------------------ housekeeping

    def _housekeep(self) -> None:
        """Log summaries, commit retries and the lag gauge, whenever they are due (main thread only)."""
        self.kafka_log.tick()
        now = time.monotonic()
        self.metrics.unassigned_seconds.set(now - self.unassigned_since if self.unassigned_since else 0)
        if self._in_callback:
            return
        if self.pending and now >= self.next_commit_retry:
            self._commit_pending()
        if now >= self._next_lag:
            self._update_lag()

    def _wait(self, future: Future[T]) -> T:
        """future.result(), doing the housekeeping while it runs (an insert may take long)."""
        while not future.done():
            wait_futures([future], timeout=0.5)
            if not future.done():
                self._housekeep()
        return future.result()

    def _client_error(self, err: Any) -> None:
        self.metrics.kafka_errors.labels("client").inc()

    # ------------------------------------------------------------ flushing

    def _submit(self) -> None:
        """Prepare the buffered group (overlapping the in-flight inserts), then hand it over."""
        items = self.buffer
        self._clear()
        pending = [prep for _, prep, _ in self.inflight]
        try:
            prep = self._wait(self.prepare_pool.submit(self.writer.prepare, items, pending))
        except StoreError as exc:  # ledger lookup failed: the store is down
            self.buffer = items
            self._reap(wait=True)
            self._store_down(exc)
            return
        while len(self.inflight) >= self.inserters and not self.paused:
            t_wait = time.monotonic()
            self._reap(wait=True, oldest_only=True)
            self.waited += time.monotonic() - t_wait
        if self.paused:  # an in-flight insert failed: this group goes back to be retried
            self.buffer.extend(items)
            return
        self.inflight.append((items, prep, self.pool.submit(self.writer.insert, prep)))

    def _reap(self, wait: bool, oldest_only: bool = False) -> None:
        """Settle finished inserts, oldest first (or wait for them); stop at one still running.

        A failed insert pauses the loader: the groups in flight behind it are
        waited for and go back to the buffer with it, uncommitted, in order.
        """
        while self.inflight:
            items, prep, future = self.inflight[0]
            if not wait and not future.done():
                return
            self.inflight.popleft()
            try:
                self._wait(future)
            except StoreError as exc:
                held = list(items)
                while self.inflight:
                    later, _, fut = self.inflight.popleft()
                    with contextlib.suppress(StoreError):  # held and retried either way
                        self._wait(fut)
                    held.extend(later)
                self.buffer = held + self.buffer
                self._store_down(exc)
                return
            self._committed(items, self.writer.settle(prep))
            if oldest_only:
                return

    def _store_down(self, exc: Exception) -> None:
        self.metrics.retries.inc()
        if not self.paused:
            self.consumer.pause(self.consumer.assignment())
            self.paused = True
            self.metrics.paused.set(1)
        log.warning("store unavailable (%s); paused, retrying in %.1f s", exc, self.backoff)
        self.next_retry = time.monotonic() + self.backoff
        self.backoff = min(self.backoff * 2, self.cfg.backoff_max)

    def _retry(self) -> None:
        """While paused: flush everything held (on an insert thread, housekeeping meanwhile); resume on success."""
        items = self.buffer
        try:
            result = self._wait(self.pool.submit(self.writer.flush, items))
        except StoreError as exc:
            self._store_down(exc)
            return
        self._clear()
        self._committed(items, result)
        self.consumer.resume(self.consumer.assignment())
        self.paused = False
        self.metrics.paused.set(0)
        log.info("store back; resumed consumption")

    def _settle(self, final: bool) -> None:
        """Finish the in-flight inserts and flush what is buffered (shutdown, rebalance)."""
        if self.inflight:
            self._reap(wait=True)
        if self.buffer and not self.paused:
            items = self.buffer
            try:
                result = self.writer.flush(items)
            except StoreError as exc:
                log.warning("store unavailable; %d messages left uncommitted for redelivery: %s", len(items), exc)
                return
            self._clear()
            self._committed(items, result)

    def _committed(self, items: list[Incoming], result: FlushResult) -> None:
        """The store acknowledged `items`: commit their offsets (fault-injection hook first)."""
        if self.crash_after_insert:
            log.warning("%s set: SIGKILL after the insert, before the commit", CRASH_ENV)
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)
        ends: dict[Key, int] = {}
        for item in items:
            key = (item.topic, item.partition)
            ends[key] = max(ends.get(key, -1), item.offset + 1)
        for key, offset in ends.items():
            self.pending[key] = max(self.pending.get(key, -1), offset)
        if self.pending:
            self._commit_pending()
        acked, self.acked = self.acked, {}
        waiting = {k: o for k, o in self.pending.items() if acked.get(k) != o}
        status = [f"committed {offsets_text(acked)}"] if acked else []
        if waiting:
            status.append(f"commit pending {offsets_text(waiting)}")
        log.info(
            "flush %s; loaded %s; %s", result.summary(), offsets_text(ends), "; ".join(status) or "nothing to commit"
        )
        self.rows_loaded += result.rows
        self.last_flush_at = time.time()
        self.backoff = self.cfg.backoff_initial
