"""Staged rollout on real Kafka + ClickHouse 18.16 / chDB: canary, soak, gates, promotion, rollback,
kill switch, and `dyncc control rollout status`.  Agents are simulated by ApplyStatus messages."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from controller.rollout import records as rs
from controller.rollout.cli import rollout_status
from controller.rollout.generate import fingerprint
from controller.rollout.publish import Publisher
from controller.rollout.settings import RolloutSettings
from controller.store import Store
from schemas.congestion_pb2 import ApplyStatus, CongestionConfig, PrefixEntry
from schemas.signing import load_public_key, verify
from tests.support.rollout_util import (
    desired,
    make_keys,
    produce,
    publish_round,
    publisher,
    read_configs,
    run_control,
    status,
)

pytestmark = pytest.mark.kafka

HOSTS = ["edge-1", "edge-2", "edge-3", "edge-4"]
D1 = ["192.0.2.0/24", "198.51.100.0/24", "2001:db8:0:100::/56"]
ADDED = ["203.0.113.0/24", "2001:db8:0:200::/56"]
D2 = D1 + ADDED


# long enough that the round after the canary's report still finds it soaking when the machine is
# loaded (with 1 s a slow round once saw the soak over and promoted at once)
SOAK, SOAK_SECONDS = "3s", 3.0


class Env:
    def __init__(self, store: Store, store_url: str, brokers: str, topic: str, tmp_path: Path) -> None:
        self.store, self.store_url, self.brokers = store, store_url, brokers
        self.cfg_topic, self.status_topic = topic + "_cfg", topic + "_st"
        self.private, self.public = make_keys(tmp_path)
        self.base = [
            "--kafka",
            brokers,
            "--config-topic",
            self.cfg_topic,
            "--status-topic",
            self.status_topic,
            "--key",
            str(self.private),
        ]
        self.publisher = publisher(
            self.store,
            [
                *self.base,
                "--canary-hosts",
                "lax:edge-1",
                "--soak",
                SOAK,
                "--wave-timeout",
                "60s",
                "--baseline",
                "10m",
                "--min-samples",
                "20",
                "--min-mem-available",
                "256M",
                "--max-load",
                "8",
                "--max-p10-regression",
                "0.2",
            ],
        )

    def round(self, prefixes: list[str], pop: str = "lax") -> None:
        publish_round(self.publisher, [desired(pop, prefixes)])

    def configs(self) -> list[tuple[str, CongestionConfig]]:
        got = read_configs(self.brokers, self.cfg_topic)
        for _, config in got:
            verify(config, load_public_key(self.public))
        return got

    def report(self, *statuses: ApplyStatus) -> None:
        produce(self.brokers, self.status_topic, list(statuses))

    def state(self, pop: str = "lax") -> rs.RolloutState:
        return rs.load_state(self.store, pop)

    def control(self, *argv: str) -> int | None:
        return run_control(list(argv))


@pytest.fixture
def env(store: Store, store_url: str, kafka_brokers: str, kafka_topic: str, tmp_path: Path) -> Env:
    return Env(store, store_url, kafka_brokers, kafka_topic, tmp_path)


def _entries(config: CongestionConfig) -> list[str]:
    return [e.prefix for e in config.entries]


def _fp(prefixes: list[str]) -> str:
    return fingerprint([PrefixEntry(prefix=p, algorithm="bbr") for p in prefixes])


def _round_status(env: Env, prefixes: list[str], trial_prefixes: dict[str, int]) -> tuple[str, str]:
    state = desired("lax", prefixes)
    state.trial_prefixes = trial_prefixes
    outcome = publish_round(env.publisher, [state])["lax"]
    return outcome.status, outcome.reason.split("; ")[-1]


def _start_canary(env: Env) -> None:
    """v1 = D1 to the whole POP (no host known yet), every host applies it; then D2 goes to the canary."""
    env.round(D1)
    assert env.state().phase == "idle" and env.state().stable_version == 1
    env.report(*(status(h, 1, 1) for h in HOSTS))
    env.round(D2)
    state = env.state()
    assert (state.phase, state.wave_version, state.wave_hosts) == ("canary", 2, ("edge-1",))
    got = env.configs()
    assert [(k, c.version, list(c.target_hosts)) for k, c in got] == [("lax", 1, []), ("lax/canary", 2, ["edge-1"])]
    assert set(_entries(got[1][1])) == set(D2)


def _tcpinfo(store: Store, host: str, prefixes: list[str], start_ns: int, step_ns: int, rates: np.ndarray) -> None:
    n = len(rates)
    time_ns = start_ns + np.arange(n, dtype=np.uint64) * np.uint64(step_ns)
    store.insert_columns(
        "tcpinfo",
        {
            "time": (time_ns // 10**9).astype(np.uint32),
            "time_ns": time_ns.astype(np.uint64),
            "pop": ["lax"] * n,
            "host": [host] * n,
            "prefix": [prefixes[i % len(prefixes)] for i in range(n)],
            "family": np.full(n, 2, dtype=np.uint8),
            "delivery_rate": rates.astype(np.uint64),
            "bytes_acked": np.full(n, 500_000, dtype=np.uint64),
        },
    )


def _assert_rest_never_targeted(got: list[tuple[str, CongestionConfig]], bad: list[str]) -> None:
    """The bad desired state only ever went out on the canary key, targeted at the canary host."""
    carrying = [(k, list(c.target_hosts)) for k, c in got if fingerprint(c.entries) == _fp(bad)]
    assert carrying == [("lax/canary", ["edge-1"])]


def _p10_rates(rng: np.random.Generator, median: float, n: int = 60) -> np.ndarray:
    return rng.normal(median, median * 0.05, n).clip(1)


def test_canary_passes_gates_and_is_promoted_after_soak(env: Env) -> None:
    _start_canary(env)
    started = env.state().wave_started_ns
    rng = np.random.default_rng(1)
    _tcpinfo(env.store, "edge-1", ADDED, started - 300 * 10**9, 10**9, _p10_rates(rng, 10e6))
    env.report(status("edge-1", 2, 2))
    env.round(D2)
    assert env.state().phase == "canary"  # applied, soaking
    applied_ns = time.time_ns()
    _tcpinfo(env.store, "edge-1", ADDED, applied_ns, 10**6, _p10_rates(rng, 10.2e6))
    time.sleep(SOAK_SECONDS + 0.2)
    env.round(D2)
    state = env.state()
    assert (state.phase, state.event, state.wave_version) == ("rest", "promote", 3)
    assert "p10 delivery rate" in state.reason and "not judged" not in state.reason
    assert "2 changed prefixes" in state.reason
    got = env.configs()
    assert [(k, c.version, list(c.target_hosts)) for k, c in got][-1] == ("lax", 3, [])
    assert set(_entries(got[-1][1])) == set(D2)

    env.report(*(status(h, 3, 3, ApplyStatus.UNCHANGED if h == "edge-1" else ApplyStatus.APPLIED) for h in HOSTS))
    env.round(D2)
    state = env.state()
    assert (state.phase, state.event, state.stable_version) == ("idle", "complete", 3)
    env.round(D2)  # unchanged desired state: nothing new
    assert len(env.configs()) == 3

    text = rollout_status(env.store, ["lax"])
    assert "POP lax: IDLE  stable v3" in text
    for host in HOSTS:
        assert host in text
    assert "v3 published promote 5 prefixes" in text


@pytest.mark.parametrize("failure", ["apply_failed", "bad_health"])
def test_failing_canary_is_rolled_back_and_rest_never_receives_it(env: Env, failure: str) -> None:
    _start_canary(env)
    if failure == "apply_failed":
        env.report(status("edge-1", 2, 1, ApplyStatus.FAILED_ROLLED_BACK, errors=("route add: ENETUNREACH",)))
    else:
        env.report(status("edge-1", 2, 2, mem=64 * 2**20))
    env.round(D2)
    state = env.state()
    assert (state.phase, state.event, state.stable_version) == ("idle", "rollback", 3)
    expected = "FAILED_ROLLED_BACK for version 2" if failure == "apply_failed" else "available memory 64 MiB"
    assert expected in state.reason
    got = env.configs()
    assert [(k, c.version, list(c.target_hosts)) for k, c in got] == [
        ("lax", 1, []),
        ("lax/canary", 2, ["edge-1"]),
        ("lax", 3, []),
    ]
    assert set(_entries(got[2][1])) == set(D1)  # v3 = the previous desired state, higher version
    _assert_rest_never_targeted(got, D2)

    # the same desired state is held down, not retried every round
    env.round(D2)
    assert len(env.configs()) == 3 and env.state().event == "rollback"
    # hosts report the rollback; a different desired state starts a new canary
    env.report(*(status(h, 3, 3) for h in HOSTS))
    env.round(D1 + ADDED[:1])
    assert env.state().phase == "canary" and env.configs()[-1][0] == "lax/canary"


def test_canary_p10_regression_is_rolled_back(env: Env) -> None:
    _start_canary(env)
    started = env.state().wave_started_ns
    rng = np.random.default_rng(2)
    _tcpinfo(env.store, "edge-1", ADDED, started - 300 * 10**9, 10**9, _p10_rates(rng, 10e6))
    # another host's traffic and other POP rows must not count
    _tcpinfo(env.store, "edge-2", ADDED, time.time_ns(), 10**6, _p10_rates(rng, 50e6))
    env.report(status("edge-1", 2, 2))
    env.round(D2)
    assert env.state().phase == "canary"
    _tcpinfo(env.store, "edge-1", ADDED, time.time_ns(), 10**6, _p10_rates(rng, 6e6))
    time.sleep(SOAK_SECONDS + 0.2)
    env.round(D2)
    state = env.state()
    assert (state.phase, state.event, state.stable_version) == ("idle", "rollback", 3)
    assert "regressed: p10 delivery rate" in state.reason and "edge-1" in state.reason
    got = env.configs()
    assert set(_entries(got[-1][1])) == set(D1) and got[-1][0] == "lax"
    _assert_rest_never_targeted(got, D2)


def test_controller_restart_keeps_rollout_state(env: Env) -> None:
    _start_canary(env)
    # a "restarted" controller: a fresh publisher, same store and topics
    env.publisher = publisher(env.store, [*env.base, "--soak", "0s", "--canary-hosts", "lax:edge-1"])
    env.report(status("edge-1", 2, 2))
    env.round(D2)
    state = env.state()
    assert (state.phase, state.wave_version) == ("rest", 3)  # continued the canary of v2, promoted


def test_kill_switch_pop_all_and_release(env: Env, tmp_path: Path) -> None:
    env.round(D1)
    env.round(D1, pop="fra")
    code = env.control(*env.base, "kill-switch", "--pop", "lax", "--clickhouse", env.store_url)
    assert code == 0
    got = env.configs()
    kill = got[-1][1]
    assert (got[-1][0], kill.pop, kill.version, kill.kill_switch, len(kill.entries)) == ("lax", "lax", 2, True, 0)
    assert env.state().phase == "killed"
    env.round(D2)  # killed POPs publish nothing until released
    assert len(env.configs()) == 3

    # options given after the action name work too
    code = env.control("kill-switch", "--all", "--clickhouse", env.store_url, *env.base)
    assert code == 0
    kills = [(k, c.version) for k, c in env.configs()[3:] if c.kill_switch]
    assert kills == [("fra", 2), ("lax", 3)]

    code = env.control(*env.base, "kill-switch", "--pop", "lax", "--release", "--clickhouse", env.store_url)
    assert code == 0
    assert env.state().phase == "idle" and env.state("fra").phase == "killed"
    env.round(D1)
    last = env.configs()[-1][1]
    assert last.pop == "lax" and last.version == 4 and set(_entries(last)) == set(D1)


def test_kill_switch_to_publish_dir(store: Store, store_url: str, tmp_path: Path) -> None:
    private, _ = make_keys(tmp_path)
    out = tmp_path / "cfg"
    args = ["--publish-dir", str(out), "--key", str(private)]
    publish_round(publisher(store, args), [desired("lax", D1)])
    assert run_control([*args, "kill-switch", "--all", "--clickhouse", store_url]) == 0
    config = CongestionConfig.FromString((out / "lax.cfg").read_bytes())
    assert config.kill_switch and config.version == 2 and not config.entries and config.signature


def test_rollout_status_action_prints_hosts(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    _start_canary(env)
    env.report(status("edge-1", 2, 1, ApplyStatus.FAILED_ROLLED_BACK, errors=("boom",)))
    assert env.control(*env.base, "rollout", "advance", "--clickhouse", env.store_url) == 0
    out = capsys.readouterr().out
    assert "POP lax: IDLE  stable v3" in out and "canary wave v2 failed: edge-1" in out
    assert "errors: boom" in out
    assert env.control("rollout", "status", "--clickhouse", env.store_url, "--pop", "lax") == 0
    assert "POP lax" in capsys.readouterr().out


def test_settings_built_directly_take_the_defaults(store: Store, tmp_path: Path) -> None:
    """The lab builds a RolloutSettings directly, naming only a few settings."""
    private, _ = make_keys(tmp_path)
    cfg = RolloutSettings(publish_dir=tmp_path / "cfg", private_key=private)
    publish_round(Publisher(store, cfg), [desired("lax", D1)])
    assert CongestionConfig.FromString((tmp_path / "cfg" / "lax.cfg").read_bytes()).version == 1


def test_trial_toggles_of_canaried_prefixes_skip_the_canary_wave(env: Env) -> None:
    """A switchback trial toggles a prefix every block: once the prefix was on BBR in a POP-wide
    config since its trial began, toggling it (off or on again) goes to the whole POP at once; a
    prefix never published POP-wide in its trial, or any other change, still goes to the canary."""
    since = time.time_ns() - 10**9
    trials = {p: since for p in D1}
    env.round(D1)  # v1: POP-wide (no host known yet)
    env.report(*(status(h, 1, 1) for h in HOSTS))

    def toggle(prefixes: list[str], trial_prefixes: dict[str, int]) -> rs.RolloutState:
        state = desired("lax", prefixes)
        state.trial_prefixes = trial_prefixes
        publish_round(env.publisher, [state])
        return env.state()

    off = toggle(D1[1:], trials)  # the cubic block of D1[0]
    assert (off.phase, off.event, off.stable_version) == ("idle", "full", 2)
    assert "trial" in off.reason
    env.report(*(status(h, 2, 2) for h in HOSTS))
    on = toggle(D1, trials)  # back on bbr: it was in v1 since its trial began
    assert (on.phase, on.event, on.stable_version) == ("idle", "full", 3)
    env.report(*(status(h, 3, 3) for h in HOSTS))
    got = env.configs()
    assert [(k, c.version, list(c.target_hosts)) for k, c in got] == [("lax", 1, []), ("lax", 2, []), ("lax", 3, [])]

    # toggles mixed with new prefixes: the toggles go POP-wide, and the new prefixes (not on BBR
    # POP-wide in their trial) start their canary in the same round (before, they waited a round,
    # and with a toggle every round for ever)
    later = time.time_ns()
    trials2 = {**trials, **{p: later for p in ADDED}}
    mixed = toggle(D1[1:] + ADDED, trials2)
    assert (mixed.phase, mixed.stable_version, mixed.wave_version, mixed.wave_hosts) == ("canary", 4, 5, ("edge-1",))
    (k4, c4), (k5, c5) = env.configs()[-2:]
    assert (k4, c4.version, list(c4.target_hosts), set(_entries(c4))) == ("lax", 4, [], set(D1[1:]))
    assert (k5, c5.version, list(c5.target_hosts), set(_entries(c5))) == (
        "lax/canary",
        5,
        ["edge-1"],
        set(D1[1:] + ADDED),
    )
    env.report(status("edge-1", 5, 5), *(status(h, 4, 4) for h in HOSTS[1:]))

    # a toggle while the canary is in flight goes out at once: POP-wide on the stable config, and
    # to the canary host on the candidate (the wave keeps its change and its start)
    during = toggle(D2, trials2)  # D1[0] back on
    assert (during.phase, during.event, during.wave_version) == ("canary", "toggle", 5)
    assert (during.stable_version, during.candidate_version) == (6, 7)
    (k6, c6), (k7, c7) = env.configs()[-2:]
    assert (k6, c6.version, list(c6.target_hosts), set(_entries(c6))) == ("lax", 6, [], set(D1))
    assert (k7, c7.version, list(c7.target_hosts), set(_entries(c7))) == ("lax/canary", 7, ["edge-1"], set(D2))
    env.report(status("edge-1", 7, 7), *(status(h, 6, 6) for h in HOSTS[1:]))
    # nothing new to toggle: the wave soaks on, and the round counts (its trial asks are not held)
    assert _round_status(env, D2, trials2) == ("unchanged", "trial toggles in force")
    assert len(env.configs()) == 7
    # a round with another change, which waits for the wave, is held
    held, why = _round_status(env, [*D2, "198.51.100.128/25"], trials2)
    assert held == "held" and why.startswith("rollout of v7 in flight"), why
    time.sleep(SOAK_SECONDS)
    promoted = toggle(D2, trials2)
    assert (promoted.phase, promoted.wave_version) == ("rest", 8)
    assert set(_entries(env.configs()[-1][1])) == set(D2)

    # a toggle during the rest wave: the candidate with it goes POP-wide and becomes the stable one
    rest = toggle(D2[1:], trials2)  # D1[0] off again
    assert (rest.phase, rest.event, rest.wave_version, rest.candidate_version) == ("rest", "toggle", 8, 9)
    assert env.configs()[-1][0] == "lax" and set(_entries(env.configs()[-1][1])) == set(D2[1:])
    env.report(*(status(h, 9, 9) for h in HOSTS))
    done = toggle(D2[1:], trials2)
    assert (done.phase, done.event, done.stable_version) == ("idle", "complete", 9)
    assert len(env.configs()) == 9  # the desired state is in force: nothing more published
