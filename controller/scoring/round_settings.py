"""The settings a controller round scored and decided with: written with the round, read back.

Every round that writes `selections` rows also writes one `round_settings` row per POP
(sql/migrations/011_round_settings.sql): the bucket and lookback, --expire, the ScoringSettings
and EvidenceSettings as JSON objects (field name -> value, in the fields' units) and the dyncc
version.  `dyncc control explain` reads them back (`deciding_round`, `recorded_settings`) to
explain a prefix with the settings of the latest round that decided it; the report and the lab's
summary read the recorded bucket length (controller/evidence/load.py `recorded_bucket`).

The operator's controls a round applied go to `round_controls` (sql/migrations/012): the deny
list in force, --max-bbr-per-pop and the POP's pins (`write_round_controls`); a round compares its
deny list with the previous round's (`previous_deny`, `deny_change`) and logs a change.

A settings object is written as the values of its setting fields and read back by building the
class from them: names the class does not know (written by a newer dyncc) are left out, names
it lacks take the default, and the class's own checks run (SettingsUnreadable when they fail).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from controller.evidence.settings import EvidenceSettings
from controller.scoring.settings import ScoringSettings
from controller.store.sql import query
from dyncc_common.errors import ConfigError, DynccError
from dyncc_common.settings import Settings
from dyncc_common.version import dyncc_version

if TYPE_CHECKING:
    from controller.store import Store

__all__ = [
    "RecordedSettings",
    "SettingsUnreadable",
    "deciding_round",
    "deny_change",
    "deny_text",
    "previous_deny",
    "recorded_settings",
    "settings_from_json",
    "settings_json",
    "write_round_controls",
    "write_round_settings",
]

S = TypeVar("S", bound=Settings)
RECENT_DAYS = 2  # a deny list change is looked for in the rounds of the last two days


class SettingsUnreadable(DynccError):
    """Recorded settings that do not make a valid settings object (the reason, one line)."""


@dataclass(frozen=True)
class RecordedSettings:
    """What one round recorded for one POP."""

    round_id: str
    round_time: dt.datetime  # aware, UTC
    scoring: ScoringSettings
    evidence: EvidenceSettings | None  # None: the round ran without trials


def _setting_fields(cls: type[Settings]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if "setting" in f.metadata]  # type: ignore[arg-type]


def settings_json(settings: Settings) -> str:
    """The values of a settings object's setting fields, as a JSON object (sorted keys)."""
    values = {name: getattr(settings, name) for name in _setting_fields(type(settings))}
    return json.dumps(values, sort_keys=True, separators=(",", ":"))


def settings_from_json(cls: type[S], text: str) -> S:
    """A `cls` from settings_json text (see the module docstring); SettingsUnreadable."""
    try:
        values = json.loads(text)
    except ValueError as exc:
        raise SettingsUnreadable(f"not JSON: {exc}") from None
    if not isinstance(values, dict):
        raise SettingsUnreadable("not a JSON object")
    known = set(_setting_fields(cls))
    try:
        return cls(**{k: v for k, v in values.items() if k in known})
    except (ConfigError, TypeError, ValueError) as exc:
        raise SettingsUnreadable(str(exc)) from None


def write_round_settings(
    store: Store,
    pops: Iterable[str],
    round_id: str,
    round_time_ns: int,
    cfg: ScoringSettings,
    evidence: EvidenceSettings | None,
) -> int:
    """One round_settings row per POP of the round; returns the rows written."""
    names = sorted({str(p) for p in pops})
    n = len(names)
    if n == 0:
        return 0

    def same(value: Any, dtype: str) -> np.ndarray:
        return np.full(n, value, dtype=dtype)

    return store.insert_columns(
        "round_settings",
        {
            "round_id": [round_id] * n,
            "round_time": same(round_time_ns // 1_000_000_000, "int64").astype("datetime64[s]"),
            "round_time_ns": same(round_time_ns, "uint64"),
            "pop": names,
            "bucket_seconds": same(cfg.bucket_seconds, "uint32"),
            "lookback_seconds": same(cfg.lookback_seconds, "uint32"),
            "expire_seconds": same(cfg.expire_seconds, "uint32"),
            "scoring": [settings_json(cfg)] * n,
            "evidence": [settings_json(evidence) if evidence is not None else ""] * n,
            "dyncc_version": [dyncc_version()] * n,
        },
    )


def write_round_controls(
    store: Store,
    pops: Iterable[str],
    round_id: str,
    round_time_ns: int,
    deny: Sequence[str],
    max_bbr_per_pop: int,
    pins_per_pop: Mapping[str, int],
) -> int:
    """One round_controls row per POP of the round (sql/migrations/012_operator_controls.sql):
    the deny list in force, the cap and the POP's pins; returns the rows written."""
    names = sorted({str(p) for p in pops})
    n = len(names)
    if n == 0:
        return 0
    return store.insert_columns(
        "round_controls",
        {
            "round_id": [round_id] * n,
            "round_time": np.full(n, round_time_ns // 1_000_000_000, dtype="int64").astype("datetime64[s]"),
            "round_time_ns": np.full(n, round_time_ns, dtype="uint64"),
            "pop": names,
            "deny": [deny_text(deny)] * n,
            "max_bbr_per_pop": np.full(n, max_bbr_per_pop, dtype="uint32"),
            "pins": np.array([pins_per_pop.get(p, 0) for p in names], dtype="uint32"),
        },
    )


def deny_text(deny: Sequence[str]) -> str:
    """The deny list as recorded: its ranges as given, comma-separated ('' = none)."""
    return ",".join(d.strip() for d in deny)


def previous_deny(store: Store, pop: str, now: dt.datetime) -> dict[str, tuple[str, str]]:
    """pop -> (round_id, deny list) of the latest round before `now` (within RECENT_DAYS) that
    recorded its controls; {} on a store without round_controls."""
    if not store.table_exists("round_controls"):
        return {}
    params = {"pop": pop, "now_ns": _ns(now), "since": now - dt.timedelta(days=RECENT_DAYS)}
    rows = store.query_rows(query("scoring_round_controls_last"), params)
    return {_text(p): (_text(r), _text(d)) for p, d, r in rows}


def deny_change(before: str, now: str) -> str:
    """'' when the deny lists are the same ranges, else what changed (for the round's log).  Pure."""
    old = {d for d in before.split(",") if d}
    new = {d for d in now.split(",") if d}
    if old == new:
        return ""
    parts = []
    if old - new:
        parts.append(f"no longer denied: {', '.join(sorted(old - new))}")
    if new - old:
        parts.append(f"newly denied: {', '.join(sorted(new - old))}")
    return "; ".join(parts)


def deciding_round(store: Store, pop: str, prefix: str, now: dt.datetime) -> tuple[str, dt.datetime] | None:
    """(round_id, round time) of the latest round at or before `now` that decided the prefix
    (wrote its selections row), or None."""
    rows = store.query_rows(query("scoring_deciding_round"), {"pop": pop, "prefix": prefix, "now_ns": _ns(now)})
    if not rows:
        return None
    round_id, round_ns = rows[0]
    return _text(round_id), _from_ns(int(round_ns))


def recorded_settings(store: Store, pop: str, round_id: str) -> RecordedSettings | None:
    """The settings round `round_id` recorded for `pop`; None when it recorded none (a round from
    before sql/migrations/011, or a store without the table); SettingsUnreadable."""
    if not store.table_exists("round_settings"):
        return None
    rows = store.query_rows(query("scoring_round_settings"), {"pop": pop, "round_id": round_id})
    if not rows:
        return None
    round_ns, expire, scoring, evidence = rows[0]
    evidence_text = _text(evidence)
    return RecordedSettings(
        round_id=round_id,
        round_time=_from_ns(int(round_ns)),
        # the expiry has its own column (rounds from before it was a scoring setting have it only there)
        scoring=dataclasses.replace(settings_from_json(ScoringSettings, _text(scoring)), expire_seconds=int(expire)),
        evidence=settings_from_json(EvidenceSettings, evidence_text) if evidence_text else None,
    )


def _ns(when: dt.datetime) -> int:
    """Unix ns, as a round's round_time_ns (controller/scoring/round.py)."""
    when = when if when.tzinfo else when.replace(tzinfo=dt.UTC)
    return int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000


def _from_ns(ns: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ns // 1_000_000_000, dt.UTC).replace(microsecond=(ns // 1000) % 1_000_000)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
