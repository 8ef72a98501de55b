"""Validation rejects every bad case with its reason; a good config passes."""

from __future__ import annotations

import pytest

from controller.rollout.generate import build_config
from controller.rollout.settings import parse_deny
from controller.rollout.validate import ValidationPolicy, validate
from schemas.congestion_pb2 import CongestionConfig, PrefixEntry

GOOD = ["192.0.2.0/24", "198.51.100.0/24", "2001:db8:0:100::/56"]
POLICY = ValidationPolicy(deny=parse_deny(["203.0.113.0/24", "198.51.100.53/32"]))


def _config(prefixes: list[str], algorithm: str = "bbr", version: int = 5, pop: str = "lax") -> CongestionConfig:
    return build_config(pop, version, [PrefixEntry(prefix=p, algorithm=algorithm) for p in prefixes], created_at_ns=1)


def _check(
    config: CongestionConfig,
    *,
    previous: list[str] | None = None,
    last_version: int = 4,
    available: frozenset[str] | None = frozenset({"bbr", "cubic"}),
    policy: ValidationPolicy = POLICY,
) -> list[str]:
    prev = None if previous is None else [PrefixEntry(prefix=p, algorithm="bbr") for p in previous]
    return validate(config, previous=prev, last_version=last_version, available=available, policy=policy)


def _codes(reasons: list[str]) -> set[str]:
    return {r.split(":", 1)[0] for r in reasons}


def test_good_config_passes() -> None:
    assert _check(_config(["192.0.2.0/24", "2001:db8:0:100::/56"]), previous=[]) == []


@pytest.mark.parametrize(
    "prefix, code",
    [
        ("192.0.2.7/24", "not_canonical"),
        ("2001:DB8:0:100::/56", "not_canonical"),
        ("2001:db8:0:100:0::/56", "not_canonical"),
        ("192.0.2.0/25", "bad_length"),
        ("192.0.0.0/16", "bad_length"),
        ("2001:db8::/48", "bad_length"),
        ("0.0.0.0/0", "default_route"),
        ("::/0", "default_route"),
        ("192.0.2.1/32", "host_route"),
        ("2001:db8::1/128", "host_route"),
        ("203.0.113.0/24", "denied"),  # a configured infrastructure range
        ("198.51.100.0/24", "denied"),  # contains a configured anycast /32
        ("127.0.0.0/24", "denied"),  # built-in: loopback
        ("fe80::/56", "denied"),  # built-in: link-local
        ("not-a-prefix", "invalid_prefix"),
    ],
)
def test_bad_prefix_rejected_with_reason(prefix: str, code: str) -> None:
    reasons = _check(_config(["192.0.2.0/24", prefix]))
    assert _codes(reasons) == {code}, reasons
    assert prefix in reasons[0] or prefix.lower() in reasons[0]


def test_duplicate_row_is_caught_not_doubled() -> None:
    reasons = _check(_config(["192.0.2.0/24", "192.0.2.0/24", "2001:db8:0:100::/56"]))
    assert _codes(reasons) == {"duplicate"}
    assert "192.0.2.0/24 appears 2 times" in reasons[0]


def test_over_cap() -> None:
    prefixes = [f"10.{i // 256}.{i % 256}.0/24" for i in range(11)]
    reasons = _check(_config(prefixes), policy=ValidationPolicy(max_per_pop=10))
    assert _codes(reasons) == {"over_cap"}
    assert "11 prefixes exceed the per-POP cap 10" in reasons[0]


def test_change_over_fraction() -> None:
    policy = ValidationPolicy(max_change_fraction=0.5, change_floor=4)
    previous = [f"10.0.{i}.0/24" for i in range(10)]
    # limit = 0.5 * max(10, 4) = 5: removing 5 passes, removing 6 fails
    assert _check(_config(previous[5:]), previous=previous, policy=policy) == []
    reasons = _check(_config(previous[6:]), previous=previous, policy=policy)
    assert _codes(reasons) == {"change_too_large"}
    assert "6 changes (+0 -6 ~0) exceed the limit 5" in reasons[0]
    # from empty the floor applies: 0.5 * 4 = 2 additions allowed
    assert _check(_config(previous[:2]), previous=[], policy=policy) == []
    assert _codes(_check(_config(previous[:3]), previous=[], policy=policy)) == {"change_too_large"}
    # an algorithm change counts as a change
    switched = build_config(
        "lax",
        5,
        [PrefixEntry(prefix=p, algorithm="cubic") for p in previous[:6]]
        + [PrefixEntry(prefix=p, algorithm="bbr") for p in previous[6:]],
        created_at_ns=1,
    )
    assert _codes(_check(switched, previous=previous, policy=policy)) == {"change_too_large"}


def test_algorithm_not_allowed_and_not_available() -> None:
    reasons = _check(_config(GOOD[:1], algorithm="reno"))
    assert _codes(reasons) == {"algorithm_not_allowed"}
    policy = ValidationPolicy(allowed_algorithms=frozenset({"bbr", "cubic", "bbr3"}))
    reasons = _check(_config(["192.0.2.0/24"], algorithm="bbr3"), policy=policy)
    assert _codes(reasons) == {"algorithm_not_available"}
    assert "'bbr3'" in reasons[0]
    # no agent has reported yet: only the allowed set applies
    assert _check(_config(["192.0.2.0/24"], algorithm="bbr3"), policy=policy, available=None) == []


@pytest.mark.parametrize("version, last", [(4, 4), (3, 4), (0, 0)])
def test_version_not_increasing(version: int, last: int) -> None:
    reasons = _check(_config(GOOD[:1], version=version), last_version=last)
    assert _codes(reasons) == {"version_not_increasing"}


def test_bad_pop_and_kill_switch_with_entries() -> None:
    assert _codes(_check(_config(GOOD[:1], pop="../etc"))) == {"bad_pop"}
    config = _config(GOOD[:1])
    config.kill_switch = True
    assert _codes(_check(config)) == {"kill_switch_with_entries"}


def test_every_reason_is_reported_and_long_lists_are_summarised() -> None:
    prefixes = [f"192.0.{i}.1/24" for i in range(8)] + ["0.0.0.0/0", "192.0.2.0/24", "192.0.2.0/24"]
    reasons = _check(_config(prefixes, algorithm="reno", version=1), last_version=2)
    assert _codes(reasons) == {
        "not_canonical",
        "default_route",
        "duplicate",
        "algorithm_not_allowed",
        "version_not_increasing",
    }
    assert "not_canonical: ... and 3 more" in reasons


def test_parse_deny_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="bad deny range 'nope'"):
        parse_deny(["nope"])
