"""A loader rides out broker outages, graceful (SIGTERM) and not (SIGKILL), with commits pending.

Issue 33 item 1: a `dyncc ingest` whose broker was stopped while a commit was pending lost its
group session and never held a partition again.  Here a real loader subprocess runs against a
private Kafka 3.9 broker (deploy/kafka/kafka.sh, ports 19492/19493, its own data dir) and the
shared ClickHouse 18.16 (a database of its own).  The broker is stopped right after a flush line,
while the next groups are in flight (their commits fail: pending), five times: gracefully and
killed, for longer than the group session (the partitions are lost) and shorter.  After every
return the loader must commit again and hold all 4 partitions (dyncc_ingest_assigned_partitions
4, dyncc_ingest_unassigned_seconds 0); at the end every row is in ClickHouse exactly once.
The test has a hard bound (HARD_TIMEOUT; pytest-timeout is not installed): a loader that blocks
has its stacks dumped (py-spy) into the failure and is killed, so it cannot hold the suite.

The second test runs the rejoin watchdog in process on the shared broker: a second loader of a
one-partition topic holds nothing and, after `rejoin_after`, closes its consumer and subscribes
anew (counted), with the wait doubling, while the first keeps loading.
"""

# ruff: noqa: B023  (the loop's lambdas are waited for at once, inside their iteration)
from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.ingest.kafka import KafkaConfig, KafkaLoader
from controller.ingest.writer import BatchWriter
from controller.store import open_store
from controller.store.migrate import apply_migrations
from dyncc_common.runtime import StopFlag
from tests.conftest import unique_name
from tests.controller.ingest.test_kafka_outages import Loader, loaded_rows, produce_to, wait_until
from tests.support.ingest_kafka import count_rows, create_topic, dup_count, make_msgs, produce, total_rows
from tests.support.private_server import PrivateServer

KAFKA_PORT, KAFKA_CONTROLLER_PORT = 19492, 19493
COMMIT_ERRORS = "dyncc_ingest_kafka_errors_total{op=commit}"
PARTITIONS = 4
#: (how the broker goes, seconds it stays away): the session is 10 s, so 15 s loses the partitions
OUTAGES = [("term", 15.0), ("kill", 15.0), ("term", 3.0), ("kill", 3.0), ("term", 15.0)]
#: the whole outage test's hard bound (a run takes about 3 min): then the loader's stacks are
#: dumped (py-spy) and it is killed, so a loader that blocks fails the test instead of holding CI
HARD_TIMEOUT = 600.0


class Watchdog:
    """Kill `loader` after `seconds` (its Python stacks kept in .stacks first); cancel() when done."""

    def __init__(self, loader: Loader, seconds: float) -> None:
        self.loader = loader
        self.fired = False
        self.stacks = ""
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        try:
            out = subprocess.run(
                [spy, "dump", "--native", "--pid", str(self.loader.proc.pid)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            self.stacks = out.stdout + out.stderr
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.stacks = f"(no stacks: {exc})"
        self.loader.proc.kill()

    def cancel(self) -> None:
        self._timer.cancel()

    def verdict(self) -> str:
        return f"hard bound of {HARD_TIMEOUT:g}s reached: loader killed; its stacks:\n{self.stacks}"


@pytest.fixture
def private_kafka() -> Iterator[PrivateServer]:
    if shutil.which("java") is None:
        pytest.skip("java not installed")
    server = PrivateServer(
        "kafka", DYNCC_KAFKA_PORT=str(KAFKA_PORT), DYNCC_KAFKA_CONTROLLER_PORT=str(KAFKA_CONTROLLER_PORT)
    )
    try:
        server.start()
        yield server
    finally:
        server.remove()


def _kill(server: PrivateServer) -> None:
    pid = int((server.stack / "kafka" / "kafka.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state == "Z":
                return
        except OSError:
            return
        time.sleep(0.05)
    raise AssertionError(f"broker pid {pid} survived SIGKILL")


def _produce_spread(brokers: str, topic: str, msgs: list[tuple[str, bytes]]) -> None:
    """Round robin over the partitions: every partition has work in every phase."""
    for p in range(PARTITIONS):
        produce_to(brokers, topic, msgs[p::PARTITIONS], partition=p)


@pytest.mark.kafka
@pytest.mark.clickhouse
@pytest.mark.slow
def test_loader_resumes_after_graceful_and_killed_broker_outages_mid_commit_every_row_once(
    private_kafka: PrivateServer, clickhouse_db_url: str
) -> None:
    brokers = f"127.0.0.1:{KAFKA_PORT}"
    topic = unique_name("bout")
    url = clickhouse_db_url
    create_topic(brokers, topic, partitions=PARTITIONS)
    chunks = [make_msgs(60_000, seed=100 + i, run_id=i + 1) for i in range(len(OUTAGES) + 1)]
    loader = Loader(
        "--kafka", brokers, "--topic", topic, "--group", f"g-{topic}", "--clickhouse", url,
        "--max-wait", "200ms", "--min-rows", "1000", "--max-rows", "3000", "--inserters", "2",
        "--cache-every", "0", "--backoff-max", "2s",
    )  # fmt: skip
    watchdog = Watchdog(loader, HARD_TIMEOUT)
    want = 0
    resumed: list[float] = []
    notes: list[str] = []
    pending_seen = 0
    try:
        _produce_spread(brokers, topic, chunks[0])
        want += total_rows(chunks[0])
        for i, (how, down) in enumerate(OUTAGES):
            chunk = chunks[i]
            # mid-load, right after a flush line: the next groups are in flight, their commits fail
            wait_until(
                lambda: loaded_rows(url) >= want - 3 * total_rows(chunk) // 4,
                90,
                f"outage {i}: a quarter loaded",
                loader,
            )
            n = len(loader.lines)
            wait_until(lambda: any("flush" in line for _, line in loader.lines[n:]), 30, "a flush", loader)
            before = loader.metrics().get(COMMIT_ERRORS, 0.0)
            t_stop = time.monotonic()
            if how == "term":
                private_kafka.stop()  # the broker's controlled shutdown takes a few seconds
            else:
                _kill(private_kafka)
            t_gone = time.monotonic()
            if down > 10:  # away until the session is lost (10-25 s: a commit in flight delays it)
                wait_until(
                    lambda: "WARNING dyncc.ingest: lost " in "".join(loader.lines_between(t_stop, time.monotonic())),
                    60,
                    f"outage {i}: the partitions lost",
                    loader,
                )
                time.sleep(1.0)
            while time.monotonic() - t_gone < down:
                assert loader.proc.poll() is None, f"loader died during the outage:\n{loader.log[-4000:]}"
                time.sleep(0.5)
            away = loader.metrics()
            private_kafka.start()  # same data dir
            t_back = time.monotonic()
            _produce_spread(brokers, topic, chunks[i + 1])  # work for after the outage in any case
            want += total_rows(chunks[i + 1])
            during = "".join(loader.lines_between(t_stop, t_back))
            lost = "INFO dyncc.ingest: revoked " in during or "WARNING dyncc.ingest: lost " in during
            failed = away.get(COMMIT_ERRORS, 0.0) > before  # a commit in flight failed or went unanswered
            pending_seen += failed
            if down > 10:  # longer than the session: the partitions went, and the metrics said so
                assert lost, during[-4000:]
                assert away["dyncc_ingest_assigned_partitions"] == 0, during[-4000:]
                assert away["dyncc_ingest_unassigned_seconds"] > 0, during[-4000:]
            # resumed: a flush committed after the broker's return
            wait_until(
                lambda: any("committed" in line for line in loader.lines_between(t_back, time.monotonic())),
                90,
                f"outage {i} ({how} {down:g}s): a commit after the broker came back",
                loader,
            )
            first = next(t for t, line in loader.lines if t >= t_back and "committed" in line)
            resumed.append(first - t_back)
            wait_until(
                lambda: (
                    (m := loader.metrics())["dyncc_ingest_assigned_partitions"] == PARTITIONS
                    and m["dyncc_ingest_unassigned_seconds"] == 0
                ),
                60,
                f"outage {i}: all {PARTITIONS} partitions held again",
                loader,
            )
            if lost:  # taken back after the last loss (a graceful stop may revoke and assign before it ends)
                since = "".join(loader.lines_between(t_stop, time.monotonic()))
                last_loss = max(since.rfind("INFO dyncc.ingest: revoked "), since.rfind("WARNING dyncc.ingest: lost "))
                assert " assigned " in since[last_loss:], since[-4000:]
            notes.append(f"{how} {down:g}s: lost={lost} pending={failed} resumed {resumed[-1]:.1f}s")
        wait_until(lambda: loaded_rows(url) >= want, 120, "every row loaded", loader)
        wait_until(lambda: loader.lag() == (PARTITIONS, 0.0), 60, "lag 0 on every partition", loader)
    except AssertionError as exc:
        if watchdog.fired:
            raise AssertionError(watchdog.verdict()) from exc
        raise
    finally:
        watchdog.cancel()
        rc = loader.stop()
    log = loader.log
    assert not watchdog.fired, watchdog.verdict()
    print(
        f"\nbroker back -> first commit: median {statistics.median(resumed):.1f} s "
        f"[{min(resumed):.1f}-{max(resumed):.1f}] over {len(resumed)} outages; " + "; ".join(notes)
    )
    assert rc == 0, log[-4000:]
    assert "Traceback" not in log
    assert pending_seen >= 1, "no outage caught a commit in flight"
    assert count_rows(url) == want
    assert dup_count(url) == 0


@pytest.mark.kafka
@pytest.mark.clickhouse
def test_a_loader_without_partition_rejoins_with_a_new_consumer_doubling_its_wait(
    kafka_brokers: str, kafka_topic: str, clickhouse_db_url: str
) -> None:
    create_topic(kafka_brokers, kafka_topic, partitions=1)
    store0 = open_store(clickhouse_db_url)
    apply_migrations(store0)
    store0.close()
    stop = StopFlag()
    loaders: list[KafkaLoader] = []
    threads: list[threading.Thread] = []
    stores = []
    try:
        for _ in range(2):
            s = open_store(clickhouse_db_url)
            stores.append(s)
            cfg = KafkaConfig(
                brokers=kafka_brokers, topic=kafka_topic, group=f"g-{kafka_topic}", max_wait=0.3, rejoin_after=4.0
            )
            loaders.append(KafkaLoader(BatchWriter(s), cfg, stop))
            threads.append(threading.Thread(target=loaders[-1].run, daemon=True))
            threads[-1].start()
            if len(loaders) == 1:
                wait_until(lambda: bool(loaders[0].assignment), 40, "the first loader assigned")
        first, second = loaders
        msgs = make_msgs(4000, seed=77)
        produce(kafka_brokers, kafka_topic, msgs)

        def reg(lo: KafkaLoader, name: str) -> float:
            return lo.metrics.registry.get_sample_value(name) or 0.0

        # 4 s without a partition: a new consumer; the next after 8 s more
        wait_until(lambda: reg(second, "dyncc_ingest_consumer_rejoins_total") >= 1, 30, "the idle loader rejoins")
        holder = first if first.assignment else second
        assert reg(holder, "dyncc_ingest_assigned_partitions") == 1
        idle = second if holder is first else first
        assert reg(idle, "dyncc_ingest_assigned_partitions") == 0
        wait_until(lambda: reg(idle, "dyncc_ingest_unassigned_seconds") >= 2, 20, "the idle loader's seconds grow")
        wait_until(lambda: count_rows(clickhouse_db_url) >= total_rows(msgs), 60, "every row loaded meanwhile")
    finally:
        stop.set("test")
        for t in threads:
            t.join(30)
        for s in stores:
            s.close()
    assert count_rows(clickhouse_db_url) == total_rows(msgs)
    assert dup_count(clickhouse_db_url) == 0
