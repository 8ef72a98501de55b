"""Config generation: full desired state, deterministic order, diffs, fingerprints."""

from __future__ import annotations

import random

from controller.rollout.generate import (
    build_config,
    diff_entries,
    entry_from_desired,
    fingerprint,
    generate,
    kill_switch_config,
)
from controller.scoring.desired import DesiredEntry, DesiredState
from schemas.congestion_pb2 import PrefixEntry

PREFIXES = ["198.51.100.0/24", "2001:db8:0:100::/56", "192.0.2.0/24", "203.0.113.0/24", "2001:db8::/56", "garbage"]


def _state(prefixes: list[str], algorithm: str = "bbr", duty: float = 0.5) -> DesiredState:
    return DesiredState(
        pop="lax",
        round_id="r1",
        round_time_ns=1,
        entries=[DesiredEntry(p, algorithm, duty, 0.1, 1e6, 20.0, "select") for p in prefixes],
    )


def test_generate_is_full_state_sorted_family_then_address() -> None:
    config = generate(_state(PREFIXES), 7, created_at_ns=123)
    assert config.version == 7 and config.pop == "lax" and config.round_id == "r1"
    assert config.created_at_ns == 123 and not config.kill_switch and not config.target_hosts
    assert [e.prefix for e in config.entries] == [
        "192.0.2.0/24",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "2001:db8::/56",
        "2001:db8:0:100::/56",
        "garbage",
    ]
    assert all(e.algorithm == "bbr" and e.duty_cycle == 0.5 for e in config.entries)


def test_generate_order_and_bytes_do_not_depend_on_input_order() -> None:
    shuffled = PREFIXES[:]
    random.Random(4).shuffle(shuffled)
    a = generate(_state(PREFIXES), 3, created_at_ns=1).SerializeToString(deterministic=True)
    b = generate(_state(shuffled), 3, created_at_ns=1).SerializeToString(deterministic=True)
    assert a == b


def test_generate_keeps_duplicates_for_validation_to_catch() -> None:
    config = generate(_state(["192.0.2.0/24", "192.0.2.0/24"]), 1, created_at_ns=1)
    assert len(config.entries) == 2


def test_lock_flag_and_target_hosts() -> None:
    config = generate(_state(["192.0.2.0/24"]), 1, created_at_ns=1, lock=True)
    assert config.entries[0].lock
    targeted = build_config("lax", 2, config.entries, created_at_ns=1, target_hosts=["h2", "h1", "h2"])
    assert list(targeted.target_hosts) == ["h1", "h2"]


def test_diff_added_removed_changed() -> None:
    old = [entry_from_desired(e) for e in _state(["192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"]).entries]
    new = [
        PrefixEntry(prefix="198.51.100.0/24", algorithm="cubic"),
        PrefixEntry(prefix="203.0.113.0/24", algorithm="bbr", duty_cycle=0.9),
        PrefixEntry(prefix="2001:db8::/56", algorithm="bbr"),
    ]
    diff = diff_entries(old, new)
    assert diff.added == ["2001:db8::/56"]
    assert diff.removed == ["192.0.2.0/24"]
    assert diff.changed == ["198.51.100.0/24"]  # duty cycle alone is not a change
    assert diff.total == 3 and diff.summary() == "+1 -1 ~1"
    locked = [PrefixEntry(prefix="203.0.113.0/24", algorithm="bbr", lock=True)]
    assert diff_entries(old[2:], locked).changed == ["203.0.113.0/24"]


def test_fingerprint_tracks_actions_not_informational_fields() -> None:
    a = generate(_state(["192.0.2.0/24", "198.51.100.0/24"], duty=0.5), 1, created_at_ns=1).entries
    b = generate(_state(["198.51.100.0/24", "192.0.2.0/24"], duty=0.9), 2, created_at_ns=2).entries
    c = generate(_state(["192.0.2.0/24", "198.51.100.0/24"], algorithm="cubic"), 1, created_at_ns=1).entries
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) != fingerprint(c)
    assert fingerprint(a) != fingerprint(a[:1])


def test_kill_switch_config_is_empty() -> None:
    config = kill_switch_config("lax", 9, created_at_ns=5)
    assert config.kill_switch and config.version == 9 and len(config.entries) == 0
