"""Helpers for the rollout / config tests: a `dyncc control`-like parser, Kafka read/produce."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from controller.control import cli as control_cli
from controller.rollout.publish import Publisher
from controller.rollout.settings import RolloutSettings
from controller.rollout.signing import keygen
from controller.scoring.desired import DesiredEntry, DesiredState
from controller.store import Store
from controller.store.outcomes import PublishOutcome, write_outcomes
from schemas.congestion_pb2 import ApplyStatus, CongestionConfig, HostHealth


def control_parser() -> argparse.ArgumentParser:
    """The parser of `dyncc control` (controller/control/cli.py configure)."""
    parser = argparse.ArgumentParser(prog="dyncc control")
    control_cli.configure(parser)
    return parser


def run_control(argv: list[str]) -> int:
    """`dyncc control ARGV` in-process (the command line -> settings objects -> run)."""
    return control_cli.run(control_parser().parse_args(argv))


def rollout_settings(argv: list[str]) -> RolloutSettings:
    """The RolloutSettings of a `dyncc control` command line (without control's cross-checks)."""
    return RolloutSettings.from_sources(vars(control_parser().parse_args(argv)))


def publish_round(publisher: Publisher, states: list[DesiredState]) -> dict[str, PublishOutcome]:
    """What a controller round does with its desired states: publish, then record the outcomes."""
    outcomes = publisher.publish_round(states)
    desired_by_pop = {s.pop: s for s in states}
    write_outcomes(publisher.store, [(desired_by_pop[pop], o) for pop, o in outcomes.items()])
    return outcomes


def publisher(store: Store, argv: list[str]) -> Publisher:
    return Publisher(store, rollout_settings(argv))


def make_keys(tmp_path: Path) -> tuple[Path, Path]:
    return keygen(tmp_path / "keys")


def desired(pop: str, prefixes: list[str], algorithm: str = "bbr", round_id: str = "r") -> DesiredState:
    return DesiredState(
        pop=pop,
        round_id=round_id,
        round_time_ns=time.time_ns(),
        entries=[DesiredEntry(p, algorithm, 0.6, 0.1, 2e6, 30.0, "select: duty 0.60") for p in prefixes],
    )


def read_topic(brokers: str, topic: str, timeout: float = 20.0) -> list[tuple[str, bytes]]:
    """Every (key, value) on the topic, partition by partition, up to the high watermark."""
    consumer = Consumer(
        {
            "bootstrap.servers": brokers,
            "group.id": f"reader-{time.time_ns()}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    out: list[tuple[str, bytes]] = []
    try:
        meta = consumer.list_topics(topic, timeout=timeout)
        partitions = sorted(meta.topics[topic].partitions)
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            deadline = time.monotonic() + timeout
            seen = low
            while seen < high and time.monotonic() < deadline:
                for msg in consumer.consume(500, 0.1):
                    if msg.error() is None:
                        out.append(((msg.key() or b"").decode(), msg.value() or b""))
                        seen = (msg.offset() or 0) + 1
    finally:
        consumer.close()
    return out


def read_configs(brokers: str, topic: str) -> list[tuple[str, CongestionConfig]]:
    return [(k, CongestionConfig.FromString(v)) for k, v in read_topic(brokers, topic)]


def status(
    host: str,
    version: int,
    applied: int,
    result: int = ApplyStatus.APPLIED,
    *,
    pop: str = "lax",
    mem: int = 8 * 2**30,
    load: float = 0.5,
    errors: tuple[str, ...] = (),
    cc: tuple[str, ...] = ("bbr", "cubic", "reno"),
) -> ApplyStatus:
    return ApplyStatus(
        host=host,
        pop=pop,
        version=version,
        applied_version=applied,
        result=result,  # type: ignore[arg-type]
        errors=list(errors),
        reported_at_ns=time.time_ns(),
        health=HostHealth(
            mem_available_bytes=mem, load1=load, load5=load, tcp_sockets=10, available_congestion_controls=list(cc)
        ),
    )


def produce(brokers: str, topic: str, items: list[ApplyStatus | bytes]) -> None:
    producer = Producer({"bootstrap.servers": brokers, "acks": "all"})
    for item in items:
        if isinstance(item, bytes):
            producer.produce(topic, key=b"junk", value=item)
        else:
            producer.produce(topic, key=item.host.encode(), value=item.SerializeToString())
    assert producer.flush(20) == 0
