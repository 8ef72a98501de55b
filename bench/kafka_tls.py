"""What Kafka over TLS + SCRAM-SHA-512 costs: the collector's poll hand-off and the loader, plaintext vs TLS.

    python bench/kafka_tls.py [--rows 300000] [--runs 3]
                              [--clickhouse clickhouse://default:@127.0.0.1:19000/default]

Starts a private broker (deploy/kafka/kafka.sh with DYNCC_KAFKA_TLS_PORT, ports 19604-19607,
tests/support/kafka_tls.py) whose plaintext and SASL_SSL listeners are the same broker, so
the only difference between the two arms is the client's transport.  In each run, the two
arms alternate (plaintext first in odd runs, TLS first in even ones):

1. collector: ROWS rows of realistic batches (tests.support.ingest_synth, the collector's
   default caps: ~280 sockets and <= 900 KB per batch) go through the collector's own
   KafkaStart/KafkaSink (idempotent, acks=all, zstd level 1) as one poll; timed from the
   first send() to close() returning with every batch acknowledged.  Rows/s.
2. loader: the same rows, produced once into a fresh topic, loaded by `dyncc ingest --drain`
   into a fresh ClickHouse database; its rate from the closing log line (first message ->
   last flush).  Rows/s.

Prints each run and the median of each arm, and the ratio TLS / plaintext.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collector.telemetry.metrics import CollectMetrics
from collector.telemetry.sinks import KafkaSink, KafkaStart
from controller.store import open_store
from schemas.tcpinfo_decode import decode_batch
from tests.support.ingest_synth import synth_messages
from tests.support.kafka_tls import TlsKafka

DYNCC = str(Path(sys.executable).with_name("dyncc"))
_RATE = re.compile(r"loaded (\d+) rows in [\d.]+ s \(first message ([\d.]+) -> last flush ([\d.]+)\)")


def collector_arm(brokers: str, options: dict[str, str], msgs: list[tuple[str, bytes]]) -> float:
    """Rows/s of one poll through the collector's sink, until every batch is acknowledged."""
    rows = sum(decode_batch(m).row_count for _, m in msgs)
    start = KafkaStart(brokers, "bench-host", extra=dict(options), quiet=True)
    sink = KafkaSink(start, f"bench-tls-col-{uuid.uuid4().hex[:8]}", CollectMetrics(prometheus=False))
    sink.producer.list_topics(timeout=10)  # connected (and authenticated) before the clock starts
    t0 = time.perf_counter()
    sink.begin_poll()
    for _, value in msgs:
        sink.send(value)
    sink.end_poll()
    left = sink.close(60)
    took = time.perf_counter() - t0
    assert left == 0, f"{left} batches not delivered: {sink.last_error()}"
    return rows / took


def produce(brokers: str, topic: str, msgs: list[tuple[str, bytes]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": brokers, "linger.ms": 20, "compression.type": "zstd"})
    for host, value in msgs:
        while True:
            try:
                producer.produce(topic, key=host.encode(), value=value)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(120) == 0


def loader_arm(brokers: str, flags: list[str], topic: str, clickhouse: str) -> float:
    """Rows/s of `dyncc ingest --drain` of `topic` into a fresh database."""
    db = f"bench_tls_{uuid.uuid4().hex[:8]}"
    url = f"{clickhouse.rsplit('/', 1)[0]}/{db}"
    try:
        proc = subprocess.run(
            [DYNCC, "ingest", "--kafka", brokers, "--topic", topic, "--group", f"g-{uuid.uuid4().hex[:8]}",
             "--clickhouse", url, "--drain", "--metrics-port", "0", *flags],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        found = _RATE.search(proc.stderr)
        if proc.returncode != 0 or not found:
            raise SystemExit(f"ingest failed ({proc.returncode}): {proc.stderr[-2000:]}")
        rows, first, last = int(found.group(1)), float(found.group(2)), float(found.group(3))
        return rows / max(last - first, 1e-9)
    finally:
        store = open_store(url)
        try:
            store.drop_database()  # type: ignore[attr-defined]
        finally:
            store.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--clickhouse",
        default=os.environ.get("DYNCC_TEST_CLICKHOUSE", "clickhouse://default:@127.0.0.1:19000/default"),
    )
    ap.add_argument("--base-port", type=int, default=19604, help="four ports from here")
    args = ap.parse_args()

    msgs = list(synth_messages(args.rows, hosts=8, rows_per_poll=280, seed=42, max_bytes=900_000))
    broker = TlsKafka(args.base_port)
    print(f"starting the private TLS broker on {broker.plaintext} / {broker.sasl_ssl} ...", flush=True)
    broker.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            pw = broker.password_file(Path(tmp) / "pw")
            arms = {
                "plaintext": (broker.plaintext, {}, []),
                "tls+scram": (broker.sasl_ssl, broker.options(), broker.flags(pw)),
            }
            topic = f"bench-tls-{uuid.uuid4().hex[:8]}"
            produce(broker.plaintext, topic, msgs)  # the loader arms read the same messages
            results: dict[str, dict[str, list[float]]] = {a: {"collector": [], "loader": []} for a in arms}
            for run in range(args.runs):
                order = list(arms) if run % 2 == 0 else list(reversed(arms))
                for arm in order:
                    brokers, options, flags = arms[arm]
                    col = collector_arm(brokers, options, msgs)
                    load = loader_arm(brokers, flags, topic, args.clickhouse)
                    results[arm]["collector"].append(col)
                    results[arm]["loader"].append(load)
                    print(f"run {run + 1} {arm:10s} collector {col:>10,.0f} rows/s   loader {load:>9,.0f} rows/s")
    finally:
        broker.remove()
    print(f"\n{args.rows:,} rows, {len(msgs)} batches, median of {args.runs} runs:")
    for what in ("collector", "loader"):
        plain = statistics.median(results["plaintext"][what])
        tls = statistics.median(results["tls+scram"][what])
        print(
            f"  {what:9s} plaintext {plain:>10,.0f} rows/s   tls+scram {tls:>10,.0f} rows/s   ratio {tls / plain:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
