"""Signing, keygen, publishing to a compacted Kafka topic and to files, rejected configs never leave."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from controller.rollout.generate import build_config
from controller.rollout.publish import Publisher
from controller.rollout.signing import Signer, key_id
from controller.rollout.sinks import DirConfigSink, KafkaConfigSink, PublishError
from controller.store import Store
from schemas.congestion_pb2 import CongestionConfig, PrefixEntry
from schemas.signing import SignatureError, load_public_key, verify
from tests.support.rollout_util import (
    desired,
    make_keys,
    publish_round,
    publisher,
    read_configs,
    read_topic,
    rollout_settings,
    run_control,
)


def _config(version: int = 3, pop: str = "lax") -> CongestionConfig:
    return build_config(pop, version, [PrefixEntry(prefix="192.0.2.0/24", algorithm="bbr")], created_at_ns=1)


def test_keygen_action_writes_pair_and_refuses_overwrite(tmp_path: Path) -> None:
    args = ["keygen", "--out-dir", str(tmp_path / "k")]
    assert run_control(args) == 0
    private, public = tmp_path / "k" / "dyncc-config.key", tmp_path / "k" / "dyncc-config.pub"
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    signer = Signer.from_file(private)
    assert signer.key_id == key_id(load_public_key(public))
    from dyncc_common.errors import ConfigError

    with pytest.raises(ConfigError, match="refusing to overwrite"):
        run_control(args)
    assert run_control(["keygen", "--out-dir", str(tmp_path / "k"), "--force"]) == 0
    assert Signer.from_file(private).key_id != signer.key_id


def test_sign_round_trip_and_tamper_detection(tmp_path: Path) -> None:
    private, public = make_keys(tmp_path)
    signer, pub = Signer.from_file(private), load_public_key(public)
    config = signer.sign(_config())
    assert config.key_id == signer.key_id and len(config.signature) == 64
    decoded = CongestionConfig.FromString(config.SerializeToString())
    verify(decoded, pub)
    for mutate in (
        lambda c: setattr(c, "version", 4),
        lambda c: setattr(c, "pop", "fra"),
        lambda c: c.entries[0].__setattr__("algorithm", "cubic"),
        lambda c: c.target_hosts.append("edge-9"),
        lambda c: setattr(c, "key_id", "x"),
    ):
        tampered = CongestionConfig.FromString(config.SerializeToString())
        mutate(tampered)
        with pytest.raises(SignatureError, match="does not verify"):
            verify(tampered, pub)
    unsigned = _config()
    with pytest.raises(SignatureError, match="unsigned"):
        verify(unsigned, pub)
    other_private, _ = make_keys(tmp_path / "other")
    with pytest.raises(SignatureError):
        verify(Signer.from_file(other_private).sign(_config()), pub)


def test_missing_key_is_a_config_error(tmp_path: Path) -> None:
    from dyncc_common.errors import ConfigError

    with pytest.raises(ConfigError, match="not found"):
        Signer.from_file(tmp_path / "nope.key")


@pytest.mark.kafka
def test_kafka_sink_creates_compacted_topic_and_publishes_by_key(
    kafka_brokers: str, kafka_topic: str, tmp_path: Path
) -> None:
    private, public = make_keys(tmp_path)
    signer = Signer.from_file(private)
    sink = KafkaConfigSink(kafka_brokers, kafka_topic)
    sink.publish("lax", signer.sign(_config(1)))
    sink.publish("lax/canary", signer.sign(_config(2)))
    sink.publish("fra", signer.sign(_config(1, pop="fra")))
    sink.close()
    admin = AdminClient({"bootstrap.servers": kafka_brokers})
    resource = ConfigResource(ConfigResource.Type.TOPIC, kafka_topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=20)
    assert configs["cleanup.policy"].value == "compact"
    got = read_configs(kafka_brokers, kafka_topic)
    assert [(k, c.pop, c.version) for k, c in got] == [("lax", "lax", 1), ("lax/canary", "lax", 2), ("fra", "fra", 1)]
    for _, config in got:
        verify(config, load_public_key(public))
    with pytest.raises(PublishError, match="bad config key"):
        KafkaConfigSink(kafka_brokers, kafka_topic).publish("../x", _config())


def test_dir_sink_writes_atomically_one_file_per_pop_and_key(tmp_path: Path) -> None:
    sink = DirConfigSink(tmp_path / "out")
    sink.publish("lax", _config(1))
    sink.publish("lax", _config(2))
    sink.publish("lax/canary", _config(3))
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["lax.canary.cfg", "lax.cfg"]  # no temp files left behind
    assert CongestionConfig.FromString((tmp_path / "out" / "lax.cfg").read_bytes()).version == 2
    assert CongestionConfig.FromString((tmp_path / "out" / "lax.canary.cfg").read_bytes()).version == 3
    with pytest.raises(PublishError):
        sink.publish("a/../../b", _config())


def _rows(store: Store, pop: str) -> list[tuple]:
    return store.query_rows(
        "SELECT version, status, kind, entries, reasons, config FROM config_versions "
        "WHERE pop = %(pop)s ORDER BY created_ns",
        {"pop": pop},
    )


@pytest.mark.kafka
def test_rejected_config_is_recorded_and_never_published(
    store: Store, kafka_brokers: str, kafka_topic: str, tmp_path: Path
) -> None:
    private, public = make_keys(tmp_path)
    base = [
        "--kafka",
        kafka_brokers,
        "--config-topic",
        kafka_topic,
        "--status-topic",
        kafka_topic + "_st",
        "--key",
        str(private),
        "--deny",
        "203.0.113.0/24",
    ]
    pub = publisher(store, base)
    publish_round(pub, [desired("lax", ["192.0.2.0/24", "198.51.100.0/24"])])
    published = read_configs(kafka_brokers, kafka_topic)
    assert [(k, c.version, len(c.entries), list(c.target_hosts)) for k, c in published] == [("lax", 1, 2, [])]
    verify(published[0][1], load_public_key(public))

    bad = desired(
        "lax", ["192.0.2.0/24", "198.51.100.0/24", "198.51.100.0/24", "203.0.113.0/24", "192.0.2.1/32", "10.1.0.0/16"]
    )
    publish_round(pub, [bad])
    assert len(read_topic(kafka_brokers, kafka_topic)) == 1  # nothing new on the topic
    rows = _rows(store, "lax")
    assert [(int(r[0]), r[1], r[2]) for r in rows] == [(1, "published", "full"), (2, "rejected", "candidate")]
    reasons = list(rows[1][4])
    codes = {r.split(":")[0] for r in reasons}
    assert codes == {"duplicate", "denied", "host_route", "bad_length"}, reasons
    stored = CongestionConfig.FromString(base64.b64decode(rows[1][5]))
    assert stored.version == 2 and len(stored.entries) == 6 and not stored.signature
    assert int(rows[1][3]) == 6

    # the rejected version number is not consumed: the next good config is v2
    publish_round(pub, [desired("lax", ["192.0.2.0/24"])])
    assert [c.version for _, c in read_configs(kafka_brokers, kafka_topic)] == [1, 2]


def test_rejected_config_never_written_to_publish_dir(store: Store, tmp_path: Path) -> None:
    private, _ = make_keys(tmp_path)
    out = tmp_path / "cfg"
    pub = publisher(store, ["--publish-dir", str(out), "--key", str(private), "--max-per-pop", "2"])
    publish_round(
        pub,
        [
            desired("lax", ["192.0.2.0/24", "198.51.100.0/24"]),
            desired("fra", ["192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"]),
        ],
    )
    assert sorted(p.name for p in out.iterdir()) == ["lax.cfg"]
    assert CongestionConfig.FromString((out / "lax.cfg").read_bytes()).version == 1
    assert [(int(r[0]), r[1]) for r in _rows(store, "fra")] == [(1, "rejected")]
    assert "over_cap" in next(iter(_rows(store, "fra")[0][4]))
    before = (out / "lax.cfg").read_bytes()
    publish_round(pub, [desired("lax", ["192.0.2.0/24", "198.51.100.0/24", "2001:db8::/56"])])
    assert (out / "lax.cfg").read_bytes() == before
    assert _rows(store, "lax")[-1][1] == "rejected"


def test_publish_needs_key_and_destination(store: Store, tmp_path: Path) -> None:
    from dyncc_common.errors import ConfigError

    with pytest.raises(ConfigError, match="--key PRIVATE_PEM is required"):
        Publisher(store, rollout_settings(["--publish-dir", str(tmp_path)]))
    private, _ = make_keys(tmp_path)
    with pytest.raises(ConfigError, match="nowhere to publish"):
        Publisher(store, rollout_settings(["--key", str(private)]))
    assert store.query_rows("SELECT count() FROM config_versions")[0][0] == 0
