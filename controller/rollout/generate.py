"""Config generation: DesiredState -> versioned CongestionConfig, and config diffs.

Pure functions, no I/O.  A config is the POP's full desired state (never a
diff), its entries in a deterministic order (family, then address, then
length; unparseable prefixes last, by text, so validation can name them).
Generation does not clean anything up (no dedup, no filtering): the result is
untrusted and goes through controller/rollout/validate.py before publishing.

The diff between two configs is keyed by prefix and only looks at what the
agents act on (algorithm, lock); informational fields (duty cycle, medians,
reason) change every round and never make a new version on their own.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from controller.scoring.desired import DesiredEntry, DesiredState
from schemas.congestion_pb2 import CongestionConfig, PrefixEntry

SCHEMA_VERSION = 1


def prefix_sort_key(prefix: str) -> tuple[int, int, int, str]:
    """(family 4/6, network address, length, text); unparseable prefixes sort last."""
    try:
        net = ipaddress.ip_network(prefix, strict=False)
    except ValueError:
        return (99, 0, 0, prefix)
    return (net.version, int(net.network_address), net.prefixlen, prefix)


def entry_from_desired(entry: DesiredEntry, lock: bool = False) -> PrefixEntry:
    return PrefixEntry(
        prefix=entry.prefix,
        algorithm=entry.algorithm,
        duty_cycle=entry.duty_cycle,
        flap_ratio=entry.flap_ratio,
        median_delivery_rate=entry.median_delivery_rate,
        median_min_rtt_ms=entry.median_min_rtt_ms,
        reason=entry.reason,
        lock=lock,
    )


def build_config(
    pop: str,
    version: int,
    entries: Iterable[PrefixEntry],
    *,
    created_at_ns: int,
    round_id: str = "",
    target_hosts: Sequence[str] = (),
    kill_switch: bool = False,
) -> CongestionConfig:
    """An unsigned config holding `entries` sorted deterministically."""
    ordered = sorted(entries, key=lambda e: prefix_sort_key(e.prefix))
    config = CongestionConfig(
        schema_version=SCHEMA_VERSION,
        pop=pop,
        version=version,
        created_at_ns=created_at_ns,
        round_id=round_id,
        kill_switch=kill_switch,
    )
    config.entries.extend(ordered)
    config.target_hosts.extend(sorted(set(target_hosts)))
    return config


def generate(state: DesiredState, version: int, *, created_at_ns: int, lock: bool = False) -> CongestionConfig:
    """The POP-wide config for a desired state (target hosts are set by the rollout)."""
    return build_config(
        state.pop,
        version,
        (entry_from_desired(e, lock) for e in state.entries),
        created_at_ns=created_at_ns,
        round_id=state.round_id,
    )


def kill_switch_config(pop: str, version: int, *, created_at_ns: int) -> CongestionConfig:
    return build_config(pop, version, (), created_at_ns=created_at_ns, round_id="kill-switch", kill_switch=True)


@dataclass
class ConfigDiff:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # algorithm or lock differs

    @property
    def total(self) -> int:
        return len(self.added) + len(self.removed) + len(self.changed)

    @property
    def prefixes(self) -> list[str]:
        return sorted(set(self.added) | set(self.removed) | set(self.changed), key=prefix_sort_key)

    def summary(self) -> str:
        return f"+{len(self.added)} -{len(self.removed)} ~{len(self.changed)}"


def _action_map(entries: Iterable[PrefixEntry]) -> dict[str, tuple[str, bool]]:
    # Duplicates collapse here (last wins); validation reports them separately.
    return {e.prefix: (e.algorithm, e.lock) for e in entries}


def diff_entries(previous: Iterable[PrefixEntry], current: Iterable[PrefixEntry]) -> ConfigDiff:
    old, new = _action_map(previous), _action_map(current)
    return ConfigDiff(
        added=sorted(new.keys() - old.keys(), key=prefix_sort_key),
        removed=sorted(old.keys() - new.keys(), key=prefix_sort_key),
        changed=sorted((p for p in new.keys() & old.keys() if new[p] != old[p]), key=prefix_sort_key),
    )


def fingerprint(entries: Iterable[PrefixEntry]) -> str:
    """A short hash of what agents act on (prefix, algorithm, lock), order-independent."""
    digest = hashlib.sha256()
    for prefix, (algorithm, lock) in sorted(_action_map(entries).items()):
        digest.update(f"{prefix}|{algorithm}|{int(lock)}\n".encode())
    return digest.hexdigest()[:16]
