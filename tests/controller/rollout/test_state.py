"""Pure rollout logic: canary choice, wave gates, health, p10 judgement, availability."""

from __future__ import annotations

from controller.rollout.state import (
    GateThresholds,
    HostReport,
    WindowStats,
    available_algorithms,
    check_wave,
    choose_canary,
    judge_p10,
    soak_remaining_ns,
)

S = 10**9
TH = GateThresholds(
    soak_ns=60 * S,
    wave_timeout_ns=300 * S,
    min_mem_available=100 * 2**20,
    max_load1=8.0,
    max_p10_regression=0.1,
    min_samples=10,
)


def _r(
    host: str,
    version: int,
    applied: int,
    result: str = "APPLIED",
    *,
    at: int = 10,
    mem: int = 2**30,
    load: float = 1.0,
    errors: tuple[str, ...] = (),
) -> HostReport:
    return HostReport(host, version, applied, result, errors, mem, load, ("bbr", "cubic"), at * S, at * S)


def test_choose_canary_configured_else_stable_hash_fraction() -> None:
    hosts = [f"edge-{i}" for i in range(20)]
    assert choose_canary("lax", hosts, ["edge-3", "nope"], 0.1) == ["edge-3"]
    picked = choose_canary("lax", hosts, [], 0.1)
    assert len(picked) == 2 and set(picked) <= set(hosts)
    assert choose_canary("lax", list(reversed(hosts)), [], 0.1) == picked  # stable
    assert choose_canary("lax", ["only"], [], 0.01) == ["only"]
    assert choose_canary("lax", [], ["edge-1"], 0.5) == []
    # adding hosts keeps earlier canaries unless outranked: the choice is a deterministic ranking
    assert set(choose_canary("lax", hosts, [], 0.5)) >= set(picked)


def test_wave_success_waits_then_passes() -> None:
    reports = [_r("a", 5, 4, "UNCHANGED", at=1), _r("a", 5, 5, at=12)]
    check = check_wave(5, ["a", "b"], 0, reports, 20 * S, TH, missing_fails=True)
    assert check.status == "waiting" and check.missing == ["b"]
    check = check_wave(5, ["a", "b"], 0, [*reports, _r("b", 6, 6, at=15)], 20 * S, TH, missing_fails=True)
    assert check.status == "reported" and sorted(check.succeeded) == ["a", "b"]
    assert check.last_success_received_ns == 15 * S
    assert soak_remaining_ns(check, 20 * S, TH) == 55 * S
    assert soak_remaining_ns(check, 100 * S, TH) == 0


def test_wave_failure_report_fails_even_after_success() -> None:
    reports = [_r("a", 5, 5, at=2), _r("a", 5, 4, "FAILED_ROLLED_BACK", at=3, errors=("route add: EPERM",))]
    check = check_wave(5, ["a"], 0, reports, 4 * S, TH, missing_fails=True)
    assert check.status == "failed"
    assert "a: FAILED_ROLLED_BACK for version 5 (route add: EPERM)" in check.reasons[0]
    refused = check_wave(5, ["a"], 0, [_r("a", 5, 4, "REFUSED")], 4 * S, TH, missing_fails=True)
    assert refused.status == "failed"
    # a failure for another version is not this wave's failure
    other = check_wave(5, ["a"], 0, [_r("a", 4, 3, "FAILED_ROLLED_BACK")], 4 * S, TH, missing_fails=True)
    assert other.status == "waiting"


def test_wave_health_gates() -> None:
    low_mem = check_wave(5, ["a"], 0, [_r("a", 5, 5, mem=50 * 2**20)], 4 * S, TH, missing_fails=True)
    assert low_mem.status == "failed" and "available memory 50 MiB < 100 MiB" in low_mem.reasons[0]
    loaded = check_wave(5, ["a"], 0, [_r("a", 5, 5, load=9.5)], 4 * S, TH, missing_fails=True)
    assert loaded.status == "failed" and "load1 9.50 > 8" in loaded.reasons[0]
    # the latest report counts: a host that recovered passes, one that degraded fails
    recovered = [_r("a", 5, 5, load=9.5, at=2), _r("a", 5, 5, "UNCHANGED", at=3)]
    assert check_wave(5, ["a"], 0, recovered, 4 * S, TH, missing_fails=True).status == "reported"
    degraded = [_r("a", 5, 5, at=2), _r("a", 5, 5, "UNCHANGED", mem=1, at=3)]
    assert check_wave(5, ["a"], 0, degraded, 4 * S, TH, missing_fails=True).status == "failed"
    # mem 0 = not reported, not judged
    assert check_wave(5, ["a"], 0, [_r("a", 5, 5, mem=0)], 4 * S, TH, missing_fails=True).status == "reported"


def test_wave_timeout_fails_canary_but_not_rest() -> None:
    canary = check_wave(5, ["a", "b"], 0, [_r("a", 5, 5)], 301 * S, TH, missing_fails=True)
    assert canary.status == "failed" and "from b" in canary.reasons[0]
    rest = check_wave(5, ["a", "b"], 0, [_r("a", 5, 5)], 301 * S, TH, missing_fails=False)
    assert rest.status == "reported" and rest.missing == ["b"]


def test_judge_p10() -> None:
    ok, why = judge_p10(WindowStats(100, 10e6), WindowStats(100, 9.5e6), TH)
    assert ok and "-5.0%" in why
    ok, why = judge_p10(WindowStats(100, 10e6), WindowStats(100, 8e6), TH)
    assert not ok and "-20.0%" in why and "allowed -10%" in why
    ok, why = judge_p10(WindowStats(5, 10e6), WindowStats(100, 1e6), TH)
    assert ok and "not judged" in why


def test_available_algorithms_is_the_intersection() -> None:
    a = HostReport("a", 1, 1, "APPLIED", available_cc=("bbr", "cubic", "reno"))
    b = HostReport("b", 1, 1, "APPLIED", available_cc=("cubic", "bbr"))
    silent = HostReport("c", 1, 1, "APPLIED")
    assert available_algorithms({"a": a, "b": b, "c": silent}) == frozenset({"bbr", "cubic"})
    assert available_algorithms({}) is None
    assert available_algorithms({"c": silent}) is None
