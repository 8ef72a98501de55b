"""`dyncc ingest` keeps the scoring cache filled as data arrives (--cache-every, the keeper of
controller/statistics/keeper.py): real Kafka and ClickHouse 18.16.

Batches of the last hour, loaded by a running loader: its keeper computes every closed bucket
of the default scoring's statistics, so a controller round after it finds nothing to compute;
SIGTERM stops the loader and its keeper at once.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time

import pytest

from controller.scoring.query import refresh, window_for
from controller.scoring.settings import ScoringSettings
from controller.store import open_store
from controller.store.migrate import apply_migrations
from tests.support.ingest_kafka import count_rows, create_topic, produce, total_rows
from tests.support.ingest_synth import synth_messages

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse]


def test_a_running_loader_fills_the_cache_a_round_then_computes_nothing(
    kafka_brokers: str, kafka_topic: str, clickhouse_db_url: str
) -> None:
    create_topic(kafka_brokers, kafka_topic)
    ready = open_store(clickhouse_db_url)
    apply_migrations(ready)  # what the loader does at start; the test reads the tables from now on
    ready.close()
    now_s = int(time.time())
    first_bucket = now_s - now_s % 300 - 3 * 300  # three closed buckets, 100 polls 10 s apart
    msgs = list(
        synth_messages(8000, hosts=4, rows_per_poll=80, seed=3, max_bytes=40_000, start_ns=first_bucket * 10**9)
    )
    produce(kafka_brokers, kafka_topic, msgs)
    args = ["--kafka", kafka_brokers, "--topic", kafka_topic, "--group", f"g-{kafka_topic}"]
    args += ["--clickhouse", clickhouse_db_url, "--cache-every", "1s"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "dyncc.cli", "ingest", "--metrics-port", "0", *args],
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    store = None
    try:
        deadline = time.monotonic() + 90
        cfg = ScoringSettings()
        while time.monotonic() < deadline:
            if (
                count_rows(clickhouse_db_url) == total_rows(msgs)
                and count_rows(
                    clickhouse_db_url,
                    f"SELECT count() FROM scoring_versions WHERE source = '{cfg.source}' AND samples > 0",
                )
                >= 3
            ):
                break
            time.sleep(0.5)
        else:
            pytest.fail("the loader's keeper did not fill the cache within 90 s")
        store = open_store(clickhouse_db_url)
        window = window_for(dt.datetime.fromtimestamp(now_s, dt.UTC), cfg)
        keys = refresh(store, cfg, window, "", 1)  # version 1: below every keeper version
        assert {k.bucket_ts for k in keys} == {first_bucket, first_bucket + 300, first_bucket + 600}
        assert all(k.version > 1 for k in keys)  # computed by the keeper, none by this round
        cached = store.query_rows("SELECT count(), uniqExact(prefix) FROM scoring_cache")[0]
        assert int(cached[0]) > 0
    finally:
        if store is not None:
            store.close()
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    assert time.monotonic() - t0 < 10
    assert "scoring cache: " in err and "(pop, bucket)s computed" in err
