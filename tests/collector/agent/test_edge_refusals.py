"""What the edge refuses whoever signed it (issue 33 item 3): prefixes outside `--allow`, inside
`--deny` or a built-in range get no route, the rest of the config applies; a config signed longer
ago than `--max-config-age` is refused whole, a kill switch never.

The rule is the contract's (schemas/prefix_rules.py) and the controller's validation reads the same
ranges.  The namespace tests run the agent against real routing tables (tests/support/agent_lab.py,
`h3-*` namespaces, documentation addresses only) and, for the age, the real `dyncc agent
--from-file --once` with its TOML `[agent]` table.  The controller's side of the age: an unchanged
stable config is published again, newly signed, once it is --republish-after old (chDB store).
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collector.agent.plan import ACCEPT, REFUSE, UNCHANGED, EdgePolicy, check_config
from collector.agent.plan import REFUSAL_REASONS as REASONS
from collector.agent.settings import AgentSettings
from controller.rollout import validate
from dyncc_common.errors import ConfigError
from schemas import prefix_rules
from schemas.congestion_pb2 import ApplyStatus, CongestionConfig
from tests.collector.agent.test_routes import accepted_algorithms
from tests.support.agent_lab import POP, Lab, build_lab

DAY_NS = 86400 * 10**9
ALLOWED = "198.51.100.0/24"  # client-a: inside --allow
OUTSIDE = "203.0.113.0/24"  # client-b: a client network outside --allow
MANAGEMENT = "192.0.2.128/25"  # the edge's management hosts beside its uplink: --deny
ALLOW = ["198.51.100.0/24", "2001:db8:100::/48"]


# ------------------------------------------------------------------ the rule (pure)


def test_the_builtin_ranges_are_one_fact_both_sides_read() -> None:
    assert validate.BUILTIN_DENY is prefix_rules.BUILTIN_DENY
    policy = EdgePolicy()
    for prefix in ("127.0.0.0/24", "169.254.1.0/24", "224.0.0.0/24", "::ffff:c633:6400/120", "fe80::/56"):
        assert policy.problem(prefix) is not None and policy.problem(prefix)[0] == "builtin", prefix  # type: ignore[index]
        assert validate.prefix_problem(prefix, validate.ValidationPolicy(v6_length=56))[0] in ("denied", "bad_length")  # type: ignore[index]
    assert policy.problem("198.51.100.0/24") is None and policy.problem("2001:db8:100::/56") is None


def test_allow_and_deny() -> None:
    policy = EdgePolicy.from_texts(ALLOW, [MANAGEMENT, "2001:db8:100:ff00::/56"])
    assert policy.problem(ALLOWED) is None and policy.problem("2001:db8:100:100::/56") is None
    assert policy.problem(OUTSIDE) == ("not_allowed", f"{OUTSIDE} is outside the --allow ranges ({', '.join(ALLOW)})")
    assert policy.problem("198.51.0.0/16") is not None  # only partly inside an allowed range: refused
    assert policy.problem(MANAGEMENT)[0] == "denied"  # type: ignore[index]
    assert policy.problem("2001:db8:100:ff00::/56")[0] == "denied"  # type: ignore[index]
    assert policy.problem("192.0.0.0/16")[0] == "denied"  # type: ignore[index]  # a denied range inside it
    kept, refused = policy.split({p: None for p in (ALLOWED, OUTSIDE, MANAGEMENT)})  # type: ignore[misc]
    assert list(kept) == [ALLOWED] and sorted(refused) == [MANAGEMENT, OUTSIDE]
    with pytest.raises(ValueError, match="bad --allow range 'nope'"):
        EdgePolicy.from_texts(["nope"])


def test_settings_check_the_ranges_and_the_age(tmp_path: Path) -> None:
    base = {"pop": POP, "kafka": "127.0.0.1:19092", "public_key": ["/k.pem"]}
    with pytest.raises(ConfigError, match="bad --deny range"):
        AgentSettings.from_sources({**base, "deny": ["192.0.2.0/33"]})
    with pytest.raises(ConfigError, match="bad --max-config-age"):
        AgentSettings.from_sources({**base, "max_config_age": "soon"})
    toml = tmp_path / "agent.toml"
    toml.write_text(f'[agent]\nallow = ["{ALLOW[1]}"]\nmax_config_age = "1h"\n')
    settings = AgentSettings.from_sources({**base, "max_config_age": "2d", "allow": [ALLOWED]}, str(toml))
    assert settings.max_config_age == 2 * 86400 and settings.allow == (ALLOW[1], ALLOWED)  # the file's, then the flags'
    assert AgentSettings.from_sources(base).max_config_age == 7 * 86400  # default (docs/security.md says why)
    assert AgentSettings.from_sources({**base, "max_config_age": "0"}).max_config_age == 0  # no limit
    with pytest.raises(ConfigError, match=r"bad --max-config-age .-1s."):
        AgentSettings.from_sources({**base, "max_config_age": "-1s"})


def _config(created_at_ns: int, *, kill: bool = False, version: int = 5) -> CongestionConfig:
    return CongestionConfig(pop=POP, version=version, created_at_ns=created_at_ns, kill_switch=kill, signature=b"s")


def test_check_config_refuses_an_old_config_but_never_a_kill_switch_or_the_one_in_force() -> None:
    now = 1_800_000_000 * 10**9
    kw: dict[str, Any] = {"pop": POP, "host": "h", "signature_error": None, "now_ns": now, "max_age_ns": DAY_NS}
    fresh = check_config(_config(now - DAY_NS // 2), applied_version=4, applied_signature=b"", **kw)
    assert fresh.action == ACCEPT
    old = check_config(_config(now - 3 * DAY_NS), applied_version=0, applied_signature=b"", **kw)
    assert (old.action, old.reason) == (REFUSE, "too_old") and "signed 3.0d ago" in old.detail
    kill = check_config(_config(now - 300 * DAY_NS, kill=True), applied_version=0, applied_signature=b"", **kw)
    assert kill.action == ACCEPT
    in_force = check_config(_config(now - 3 * DAY_NS), applied_version=5, applied_signature=b"s", **kw)
    assert in_force.action == UNCHANGED  # re-read from Kafka at a restart: reconciled, not refused
    off = check_config(_config(1), applied_version=0, applied_signature=b"", **{**kw, "max_age_ns": 0})
    assert off.action == ACCEPT


# ------------------------------------------------------------------ real routes in namespaces


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    with build_lab(tmp_path, prefix="h3") as made:
        yield made


def _owned(lab: Lab) -> dict[str, str]:
    return {r["dst"]: r["metrics"][0]["congestion"] for r in lab.owned_json()}


@pytest.mark.netns
def test_refused_prefixes_get_no_route_and_the_rest_applies(lab: Lab, caplog: pytest.LogCaptureFixture) -> None:
    # an earlier agent without refusals installed all three (a controller that routes anything)
    first = lab.agent()
    assert first.handle(lab.config(1, [ALLOWED, OUTSIDE, MANAGEMENT])).result == ApplyStatus.APPLIED
    assert _owned(lab) == {ALLOWED: "bbr", OUTSIDE: "bbr", MANAGEMENT: "bbr"}
    first.close()

    # restarted with --allow / --deny: the start reconcile takes the refused prefixes' routes off
    policy = EdgePolicy.from_texts(ALLOW, [MANAGEMENT])
    caplog.set_level(logging.WARNING, "dyncc.agent")
    agent = lab.agent(agent_kw={"policy": policy})
    start = agent.reconcile("start")
    assert start.result == ApplyStatus.APPLIED and _owned(lab) == {ALLOWED: "bbr"}
    assert any(e.startswith(f"refused {OUTSIDE}: ") for e in start.errors)
    assert "config v1: 2 of 3 prefixes refused by this edge" in caplog.text

    # a new config with a refused prefix: the rest applies (a revert included), the refusal is reported
    caplog.clear()
    status = agent.handle(lab.config(2, ["2001:db8:100::/56", OUTSIDE, "127.0.0.0/24"]))
    assert status.result == ApplyStatus.APPLIED and status.applied_version == 2
    assert _owned(lab) == {"2001:db8:100::/56": "bbr"}  # ALLOWED reverted, the refused ones never installed
    assert f"refused {OUTSIDE}: {OUTSIDE} is outside the --allow ranges (198.51.100.0/24, 2001:db8:100::/48)" in (
        status.errors
    )
    assert "refused 127.0.0.0/24: 127.0.0.0/24 overlaps built-in range 127.0.0.0/8" in status.errors
    assert "config v2: 2 of 3 prefixes refused by this edge" in caplog.text
    metrics = agent.metrics.registry
    assert metrics.get_sample_value("dyncc_agent_refused_prefixes", {"reason": "not_allowed"}) == 1
    assert metrics.get_sample_value("dyncc_agent_refused_prefixes", {"reason": "builtin"}) == 1
    assert metrics.get_sample_value("dyncc_agent_refused_prefixes", {"reason": "denied"}) == 0
    counted = {r: metrics.get_sample_value("dyncc_agent_prefix_refusals_total", {"reason": r}) for r in REASONS}
    assert counted == {"builtin": 1, "denied": 1, "not_allowed": 2}  # v1 at the start, then v2: one per refusal

    # forwarding never broke: the refused client network still connects, on its covering route's cubic
    v4 = accepted_algorithms(lab, "4", "192.0.2.2", [(lab.client_a, "198.51.100.10"), (lab.client_b, "203.0.113.10")])
    assert v4 == {"198.51.100.10": "cubic", "203.0.113.10": "cubic"}
    v6 = accepted_algorithms(lab, "6", "2001:db8:1::2", [(lab.client_a, "2001:db8:100::10")])
    assert v6 == {"2001:db8:100::10": "bbr"}
    agent.close()


def _agent_cli(lab: Lab, config: CongestionConfig, tmp: Path, *extra: str) -> tuple[int, dict, str]:
    path = tmp / f"{config.version}.pb"
    path.write_bytes(config.SerializeToString())
    toml = tmp / "agent.toml"
    toml.write_text(f'[agent]\nallow = ["{ALLOW[0]}", "{ALLOW[1]}"]\nmax_config_age = "1h"\n')
    done = subprocess.run(
        [sys.executable, "-m", "dyncc.cli", "agent", "--config", str(toml), "--from-file", str(path), "--once",
         "--pop", POP, "--public-key", str(lab.public_key_path), "--netns", lab.edge,
         "--state-dir", str(lab.state_dir), *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


@pytest.mark.netns
def test_an_old_config_is_refused_even_with_a_lost_state_a_kill_switch_never(
    lab: Lab, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = time.time_ns()
    fresh = lab.config(3, [ALLOWED, OUTSIDE], created_at_ns=now - 60 * 10**9)
    code, status, err = _agent_cli(lab, fresh, tmp_path)
    assert code == 0 and status["result"] == "APPLIED" and _owned(lab) == {ALLOWED: "bbr"}, err
    assert any(e.startswith(f"refused {OUTSIDE}") for e in status["errors"])

    # the state directory is lost; a two-day-old signed config (a replayed file) is refused whole
    shutil.rmtree(lab.state_dir)
    old = lab.config(9, ["2001:db8:100::/56"], created_at_ns=now - 2 * DAY_NS)
    code, status, err = _agent_cli(lab, old, tmp_path)
    assert code == 1 and status["result"] == "REFUSED", err
    assert "signed 2.0d ago, more than --max-config-age 1.0h" in status["errors"][0]
    assert _owned(lab) == {ALLOWED: "bbr"}  # nothing changed
    assert "refused config for POP 'lax' v9" in err

    # in-process, the same agent counts the refusal and logs it in one line
    caplog.set_level(logging.WARNING, "dyncc.agent")
    agent = lab.agent(agent_kw={"max_config_age": 3600.0})
    assert agent.state.version == 0  # the state is lost: any version is newer
    refusal = agent.handle(old)
    refused = [r for r in caplog.records if r.getMessage().startswith("refused config")]
    assert refusal.result == ApplyStatus.REFUSED and len(refused) == 1, caplog.text
    assert agent.metrics.registry.get_sample_value("dyncc_agent_configs_refused_total", {"reason": "too_old"}) == 1
    assert _owned(lab) == {ALLOWED: "bbr"}
    agent.close()

    # a flag overrides the file's limit; then an old kill switch still applies: it only takes BBR off
    code, status, _ = _agent_cli(lab, old, tmp_path, "--max-config-age", "3d")
    assert code == 0 and _owned(lab) == {"2001:db8:100::/56": "bbr"}
    kill = lab.config(10, [], kill=True, created_at_ns=now - 300 * DAY_NS)
    code, status, err = _agent_cli(lab, kill, tmp_path)
    assert code == 0 and status["result"] == "APPLIED" and _owned(lab) == {}, err
