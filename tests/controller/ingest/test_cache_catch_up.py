"""The scoring cache catches up with late data after a killed loader (issue 33 item 2): real Kafka
and ClickHouse 18.16.

A loader with --cache-every 1s loads two hours of batches and its keeper caches them; a second
wave for the same two hours (another collector's backlog) is then loaded by a loader that is
SIGKILLed after its first insert, before its commit, and by the loader restarted after it,
which loads the rest and the redelivered part once.  Every bucket of the window got late data,
up to 120 minutes back.  Within a few ticks of the last row's arrival the cache equals the raw
data for every (pop, bucket, prefix) of the window (tests/support/cache_check.py); before, a
tick re-checked the newest 6 buckets and one older slice of 6 (the slice turning once per
bucket), and 10 s after the last row the 12 buckets 65-120 minutes back still held the first
wave's counts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from controller.ingest.kafka import CRASH_ENV
from controller.store import open_store
from controller.store.migrate import apply_migrations
from tests.support.cache_check import cache_differences
from tests.support.ingest_kafka import count_rows, create_topic, dup_count, produce, total_rows
from tests.support.ingest_synth import synth_messages

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse]

BUCKET = 300
BUCKETS = 24  # two hours of data, each bucket closed
CATCH_UP_S = 10.0  # --cache-every 1s: the bound is one tick after the rows are in, plus the tick


def _loader(args: list[str], crash: bool = False) -> subprocess.Popen[str]:
    env = {**os.environ, CRASH_ENV: "1" if crash else "0"}
    return subprocess.Popen(
        [sys.executable, "-m", "dyncc.cli", "ingest", "--metrics-port", "0", *args],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err


def _wait_equal(url: str, start: int, end: int, deadline_s: float) -> float:
    """Seconds until the cache equals the raw data over [start, end); fails at the deadline."""
    store = open_store(url)
    try:
        t0 = time.monotonic()
        while True:
            diff = cache_differences(store, start, end)
            if not diff:
                return time.monotonic() - t0
            if time.monotonic() - t0 > deadline_s:
                buckets = sorted({(end - k[1]) // 60 for k in diff})
                pytest.fail(f"{len(diff)} (pop, bucket, prefix)s differ after {deadline_s} s, minutes back: {buckets}")
            time.sleep(0.2)
    finally:
        store.close()


def test_late_data_after_a_killed_loader_is_in_the_cache_within_a_tick(
    kafka_brokers: str, kafka_topic: str, clickhouse_db_url: str
) -> None:
    create_topic(kafka_brokers, kafka_topic, partitions=2)
    ready = open_store(clickhouse_db_url)
    apply_migrations(ready)
    ready.close()
    now_s = int(time.time())
    end = now_s - now_s % BUCKET  # the window's end while this bucket lasts; later ones hold no data
    start = end - BUCKETS * BUCKET
    polls = BUCKETS * BUCKET // 10  # synth_messages polls 10 s apart
    common = dict(rows_per_poll=10, max_bytes=40_000, start_ns=start * 10**9)
    first = list(synth_messages(polls * 10, hosts=2, seed=5, run_id=1, **common))  # type: ignore[arg-type]
    late = list(synth_messages(polls * 10, hosts=2, seed=6, run_id=2, **common))  # type: ignore[arg-type]
    args = ["--kafka", kafka_brokers, "--topic", kafka_topic, "--group", f"g-{kafka_topic}"]
    args += ["--clickhouse", clickhouse_db_url, "--cache-every", "1s", "--max-wait", "0.2s"]
    produce(kafka_brokers, kafka_topic, first)
    proc = _loader(args)
    try:
        deadline = time.monotonic() + 90
        while count_rows(clickhouse_db_url) < total_rows(first):
            assert time.monotonic() < deadline and proc.poll() is None, "the first wave did not load"
            time.sleep(0.2)
        _wait_equal(clickhouse_db_url, start, end, 30)  # the first wave's counts are cached
    finally:
        err = _stop(proc)
    assert proc.returncode == 0, err[-2000:]
    produce(kafka_brokers, kafka_topic, late)
    crashed = _loader([*args, "--max-rows", "1000", "--min-rows", "1000"], crash=True)
    err = _stop(crashed) if crashed.wait(60) is None else crashed.communicate()[1]
    assert crashed.returncode == -signal.SIGKILL, err[-2000:]
    loaded = count_rows(clickhouse_db_url)
    assert total_rows(first) < loaded < total_rows(first) + total_rows(late)  # killed mid-backlog
    proc = _loader(args)
    try:
        deadline = time.monotonic() + 90
        while count_rows(clickhouse_db_url) < total_rows(first) + total_rows(late):
            assert time.monotonic() < deadline and proc.poll() is None, "the late wave did not load"
            time.sleep(0.1)
        caught_up = _wait_equal(clickhouse_db_url, start, end, CATCH_UP_S)
        print(f"cache equal to the raw data {caught_up:.2f} s after the last row arrived")
    finally:
        err = _stop(proc)
    assert proc.returncode == 0, err[-2000:]
    assert count_rows(clickhouse_db_url) == total_rows(first) + total_rows(late)
    assert dup_count(clickhouse_db_url) == 0
    assert "(pop, bucket)s computed" in err
