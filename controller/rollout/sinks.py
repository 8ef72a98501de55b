"""Where signed configs go: a compacted Kafka topic, or one file per POP and key.

Keys (the contract's, schemas/wire.py `config_key`; see docs/rollout.md and
controller/rollout/publish.py):
    "<pop>"         POP-wide configs (target_hosts empty)
    "<pop>/canary"  canary waves (target_hosts = the canary hosts)

KafkaConfigSink creates the topic with cleanup.policy=compact when missing
(AdminClient) and warns when an existing topic is not compacted; every publish
waits for the broker's acknowledgement (acks=all, idempotent producer) and
raises PublishError otherwise.  DirConfigSink writes DIR/<pop>.cfg and
DIR/<pop>.canary.cfg atomically (temp file, fsync, rename).  `options` are
librdkafka's TLS / SASL settings (dyncc_common.kafka_security.librdkafka_options);
a broker that refuses them is a PublishError saying so (not "unreachable").
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Protocol

from dyncc_common.errors import DynccError
from dyncc_common.files import atomic_write
from dyncc_common.kafka_log import KafkaLog
from dyncc_common.kafka_security import KafkaSecurityError, probe
from dyncc_common.names import POP_NAME_BODY
from schemas.congestion_pb2 import CongestionConfig
from schemas.wire import CANARY_SUFFIX
from schemas.wire import config_key as config_key  # the contract's key, published under by the engine

log = logging.getLogger("dyncc.publish")

_KEY = re.compile(rf"^{POP_NAME_BODY}({re.escape(CANARY_SUFFIX)})?$")


class PublishError(DynccError):
    """A config could not be published; str() is one line."""


class ConfigSink(Protocol):
    description: str

    def publish(self, key: str, config: CongestionConfig) -> None: ...

    def close(self) -> None: ...


def _check_key(key: str) -> None:
    if not _KEY.match(key):
        raise PublishError(f"bad config key {key!r}")


class DirConfigSink:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.description = f"directory {directory}"
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PublishError(f"cannot create publish directory {directory}: {exc.strerror or exc}") from exc

    @staticmethod
    def file_name(key: str) -> str:
        return key.replace(CANARY_SUFFIX, ".canary") + ".cfg"

    def path_for(self, key: str) -> Path:
        _check_key(key)
        return self.directory / self.file_name(key)

    def publish(self, key: str, config: CongestionConfig) -> None:
        path = self.path_for(key)
        data = config.SerializeToString(deterministic=True)
        try:
            atomic_write(path, data)
        except OSError as exc:
            raise PublishError(f"cannot write {path}: {exc.strerror or exc}") from exc

    def close(self) -> None:
        pass


def ensure_topic(
    brokers: str,
    topic: str,
    *,
    compact: bool,
    timeout: float = 15.0,
    retention_ms: int | None = None,
    options: dict[str, Any] | None = None,
) -> None:
    """Create `topic` if missing (compacted when `compact`); warn if an existing one differs."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    quiet = KafkaLog(log, quiet=True)
    conf: dict[str, Any] = {
        "bootstrap.servers": brokers,
        "socket.timeout.ms": int(timeout * 1000),
        "logger": quiet,
        "error_cb": quiet.error,
        **(options or {}),
    }
    admin = AdminClient(conf)
    try:
        unanswered = probe(admin, quiet, brokers, timeout)
    except KafkaSecurityError as exc:
        raise PublishError(str(exc)) from exc
    if unanswered is not None:
        raise PublishError(f"Kafka {brokers} unreachable: {unanswered}")
    try:
        meta = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise PublishError(f"Kafka {brokers} unreachable: {exc.args[0] if exc.args else exc}") from exc
    if topic not in meta.topics:
        config: dict[str, str] = {"cleanup.policy": "compact"} if compact else {}
        if retention_ms is not None:
            config["retention.ms"] = str(retention_ms)
        new = NewTopic(topic, num_partitions=1, replication_factor=-1, config=config)
        futures = admin.create_topics([new])
        for future in futures.values():
            try:
                future.result(timeout=timeout)
                log.info("created Kafka topic %s%s", topic, " (compacted)" if compact else "")
            except KafkaException as exc:
                err = exc.args[0] if exc.args else exc
                if getattr(err, "code", lambda: None)() != 36:  # TOPIC_ALREADY_EXISTS: a race, fine
                    raise PublishError(f"cannot create Kafka topic {topic}: {err}") from exc
        return
    if compact:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        try:
            configs: Any = admin.describe_configs([resource])[resource].result(timeout=timeout)
            policy = configs["cleanup.policy"].value if "cleanup.policy" in configs else ""
        except KafkaException as exc:
            log.warning("cannot read the configuration of topic %s: %s", topic, exc)
            return
        if "compact" not in (policy or ""):
            log.warning("config topic %s has cleanup.policy=%s, not compact: old configs will expire", topic, policy)


class KafkaConfigSink:
    def __init__(
        self, brokers: str, topic: str, *, timeout: float = 15.0, options: dict[str, Any] | None = None
    ) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.timeout = timeout
        self.description = f"Kafka {brokers} topic {topic}"
        ensure_topic(brokers, topic, compact=True, timeout=timeout, options=options)
        self.kafka_log = KafkaLog(logging.getLogger("dyncc.publish.kafka"))  # rate-limited librdkafka log
        self._producer = Producer(
            {
                "bootstrap.servers": brokers,
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": int(timeout * 1000),
                "logger": self.kafka_log,
                "error_cb": self.kafka_log.error,
                **(options or {}),
            }
        )

    def publish(self, key: str, config: CongestionConfig) -> None:
        from confluent_kafka import KafkaError, KafkaException

        _check_key(key)
        errors: list[str] = []

        def delivered(err: KafkaError | None, _msg: object) -> None:
            if err is not None:
                errors.append(str(err))

        try:
            self._producer.produce(
                self.topic, key=key.encode(), value=config.SerializeToString(deterministic=True), on_delivery=delivered
            )
        except (KafkaException, BufferError) as exc:
            raise PublishError(f"cannot queue config for {key} on {self.topic}: {exc}") from exc
        remaining = self._producer.flush(self.timeout)
        if remaining:
            raise PublishError(f"config for {key} not acknowledged by Kafka within {self.timeout:g}s")
        if errors:
            raise PublishError(f"config for {key} not delivered to {self.topic}: {errors[0]}")

    def close(self) -> None:
        self._producer.flush(self.timeout)
