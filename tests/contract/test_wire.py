"""The wire facts have one home (issue 36 item 3): schemas/wire.py, numpy-free, and both sides read
the same objects from it: the batch caps and header limits (collector settings, the codec, ingest's
--host), the three default topics (collect/ingest, agent/rollout), the `<pop>/canary` config key
(the controller's sinks, the agent's consumer).  The prefix rule's home is schemas/prefix_rules.py:
the agent and the controller's validation refuse exactly the same prefixes for its reasons."""

from __future__ import annotations

import dataclasses
import ipaddress
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.agent.kafka import ConfigConsumer
from collector.agent.plan import EdgePolicy, InvalidConfig, canonical_prefix
from collector.agent.settings import AgentSettings
from collector.telemetry import settings as collect_settings
from collector.telemetry.settings import CollectSettings
from controller.ingest import settings as ingest_settings
from controller.ingest.settings import IngestSettings
from controller.rollout import sinks
from controller.rollout.settings import RolloutSettings
from controller.rollout.validate import ValidationPolicy, prefix_problem
from dyncc_common.names import POP_NAME
from schemas import prefix_rules, tcpinfo_columns, tcpinfo_decode, tcpinfo_encode, wire
from tests.conftest import KAFKA_BROKERS

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "pandas", "pyarrow", "google", "confluent_kafka")


def _defaults(cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(cls)}


def test_the_wire_module_loads_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "import schemas.wire, schemas.prefix_rules\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_caps_and_limits_are_the_same_objects_on_both_sides() -> None:
    assert collect_settings.HEADER_LIMITS is wire.HEADER_LIMITS is tcpinfo_decode.HEADER_LIMITS
    assert collect_settings.DEFAULT_MAX_ROWS is wire.DEFAULT_MAX_ROWS is tcpinfo_columns.DEFAULT_MAX_ROWS
    assert collect_settings.DEFAULT_MAX_BYTES is wire.DEFAULT_MAX_BYTES is tcpinfo_columns.DEFAULT_MAX_BYTES
    assert tcpinfo_decode.MAX_CC_NAMES is wire.MAX_CC_NAMES
    assert tcpinfo_decode.MAX_CC_NAME_BYTES is wire.MAX_CC_NAME_BYTES
    assert ingest_settings.MAX_HOST_BYTES is wire.HEADER_LIMITS["host"]
    collect = _defaults(CollectSettings)
    assert (collect["max_rows"], collect["max_bytes"]) == (wire.DEFAULT_MAX_ROWS, wire.DEFAULT_MAX_BYTES)
    encode_defaults = tcpinfo_encode.split_body_parts.__defaults__
    assert encode_defaults is not None and encode_defaults[-2:] == (wire.DEFAULT_MAX_ROWS, wire.DEFAULT_MAX_BYTES)
    assert set(wire.HEADER_LIMITS) == {"host", "pop", "netns"}


def test_the_three_topics_default_alike_on_both_sides() -> None:
    assert _defaults(CollectSettings)["topic"] == _defaults(IngestSettings)["topic"] == wire.TELEMETRY_TOPIC
    agent, rollout = _defaults(AgentSettings), _defaults(RolloutSettings)
    assert agent["config_topic"] == rollout["config_topic"] == wire.CONFIG_TOPIC == "dyncc-configs"
    assert agent["status_topic"] == rollout["status_topic"] == wire.STATUS_TOPIC == "dyncc-apply-status"
    assert wire.TELEMETRY_TOPIC == "tcpinfo"


@settings(max_examples=60, deadline=None)
@given(st.from_regex(POP_NAME, fullmatch=True).filter(lambda p: not p.endswith("\n")), st.booleans())
def test_every_published_key_is_one_the_pops_agent_reads(pop: str, canary: bool) -> None:
    key = sinks.config_key(pop, canary)
    assert sinks.config_key is wire.config_key
    assert key == (f"{pop}/canary" if canary else pop)
    assert set(wire.config_keys(pop)) == {sinks.config_key(pop, False), sinks.config_key(pop, True)}
    with tempfile.TemporaryDirectory() as tmp:  # a key the file sink accepts, under its file name
        path = sinks.DirConfigSink(Path(tmp)).path_for(key)
        assert path.name == (f"{pop}.canary.cfg" if canary else f"{pop}.cfg")


def test_the_agent_reads_exactly_the_keys_the_controller_publishes_for_its_pop(tmp_path: Path) -> None:
    consumer = ConfigConsumer(KAFKA_BROKERS, "dyncc-test-wire-keys", "pop-a", "edge1")
    try:
        assert consumer.keys == {sinks.config_key("pop-a", c).encode() for c in (False, True)}
        assert sinks.config_key("pop-ab", False).encode() not in consumer.keys
        assert consumer.key == b"pop-a"
    finally:
        consumer.close()
    sink = sinks.DirConfigSink(tmp_path)
    assert sink.path_for(sinks.config_key("pop-a", True)) == tmp_path / "pop-a.canary.cfg"


# ---------------------------------------------------------------- the prefix rule, both sides


def _texts() -> st.SearchStrategy[str]:
    v4 = st.builds(lambda a, n: f"{ipaddress.IPv4Address(a)}/{n}", st.integers(0, 2**32 - 1), st.integers(0, 32))
    v6 = st.builds(lambda a, n: f"{ipaddress.IPv6Address(a)}/{n}", st.integers(0, 2**128 - 1), st.integers(0, 128))
    v6_exploded = st.builds(
        lambda a, n: f"{ipaddress.IPv6Address(a).exploded}/{n}", st.integers(0, 2**128 - 1), st.integers(0, 128)
    )
    builtin = st.builds(
        lambda net, extra: (
            str(ipaddress.ip_network(net).supernet(new_prefix=max(1, net.prefixlen - extra)))
            if extra and net.prefixlen > 1
            else str(net)
        ),
        st.sampled_from(prefix_rules.BUILTIN_DENY),
        st.integers(0, 4),
    )
    inside = st.builds(
        lambda net, more: str(next(net.subnets(prefixlen_diff=min(more, net.max_prefixlen - 1 - net.prefixlen)))),
        st.sampled_from(prefix_rules.BUILTIN_DENY),
        st.integers(0, 24),
    )
    junk = st.sampled_from(["", "nope", "10.0.0.0", "10.0.0.0/33", "::/129", "010.0.0.0/8", " 10.0.0.0/8", "1.2.3.4/x"])
    return st.one_of(v4, v6, v6_exploded, builtin, inside, junk, st.text(max_size=20))


def _agent_problem(text: str) -> str | None:
    """The agent's answer (collector/agent/plan.py): None = it routes the prefix."""
    try:
        canonical_prefix(text)
    except InvalidConfig as exc:
        return str(exc)
    problem = EdgePolicy().problem(text)
    return None if problem is None else problem[1]


@settings(max_examples=400, deadline=None)
@given(_texts())
def test_the_agent_and_the_validator_refuse_the_same_prefixes(text: str) -> None:
    shape, net = prefix_rules.shape_problem(text)
    length = net.prefixlen if net is not None else 24  # the validator's length rule is its own policy
    policy = ValidationPolicy(v4_length=length, v6_length=length, deny=())
    controller = prefix_problem(text, policy)
    agent = _agent_problem(text)
    assert (agent is None) == (controller is None), (text, agent, controller)
    if shape is not None:  # the shape rule: the same reason, word for word
        assert controller == shape and agent == f"bad prefix: {shape[1]}"
    elif controller is not None:
        assert controller[0] == "denied" and net is not None and prefix_rules.builtin_problem(net) is not None


def test_the_validator_denies_the_contracts_builtin_ranges() -> None:
    ranges = ValidationPolicy(deny=()).denied_ranges()
    assert all(a is b for a, b in zip(ranges, prefix_rules.BUILTIN_DENY, strict=True))
