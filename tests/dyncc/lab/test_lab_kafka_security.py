"""`dyncc lab --kafka` with TLS and SASL: the lab's settings carry the Kafka security part to every
Kafka client the lab builds (the publisher's settings here; the collector sinks, the loader and the
agents take the same librdkafka options, dyncc/lab/pipeline.py and agent.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dyncc.lab import control as lab_control
from dyncc.lab.cli import options_from_settings
from dyncc.lab.control import make_control_factory
from dyncc.lab.settings import LabSettings
from dyncc.lab.topology import describe
from dyncc_common.errors import ConfigError
from dyncc_common.kafka_security import librdkafka_options


def _settings(**flags: object) -> LabSettings:
    return LabSettings.from_sources({"kafka": "127.0.0.1:19640", **flags})


def test_lab_settings_carry_tls_and_scram_to_the_publisher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("not read before a client is built\n")
    monkeypatch.setenv("DSP_LAB_PW", "s3cret-lab")
    settings = _settings(
        kafka_ca=ca, kafka_sasl="SCRAM-SHA-512", kafka_user="dyncc-lab", kafka_password_env="DSP_LAB_PW"
    )
    opts = options_from_settings(settings)
    assert opts.kafka_security == settings.kafka_security
    options = librdkafka_options(opts.kafka_security)
    assert options["security.protocol"] == "sasl_ssl"
    assert options["sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["sasl.password"] == "s3cret-lab"
    assert options["ssl.ca.location"] == str(ca)
    agents: list[dict[str, Any]] = []

    class RecordedAgent:  # the real one opens netlink in the edge's namespace
        def __init__(self, store: object, **kwargs: Any) -> None:
            agents.append(kwargs)

    monkeypatch.setattr(lab_control, "LabAgent", RecordedAgent)
    topo = describe("t0")
    control = make_control_factory(tmp_path)(None, topo, opts)  # type: ignore[arg-type]
    rollout = control.rollout_settings()
    assert rollout.kafka == "127.0.0.1:19640"
    assert librdkafka_options(rollout.kafka_security) == options  # the publisher and its status reader
    assert len(agents) == len(topo.edges) and all(a["kafka_options"] == options for a in agents)
    assert "s3cret-lab" not in repr(rollout) and "s3cret-lab" not in repr(opts)


def test_plain_sasl_without_tls_is_refused_for_the_lab_too() -> None:
    with pytest.raises(ConfigError, match="PLAIN"):
        _settings(kafka_sasl="PLAIN", kafka_user="u", kafka_password_env="PW")
