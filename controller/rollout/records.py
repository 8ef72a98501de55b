"""Rollout persistence: config_versions, rollout_waves, apply_status reads, p10 windows.

All writes go through Store.insert_columns (inline INSERT ... VALUES hangs on
ClickHouse 18.16 over the native protocol); the tables are append-only logs
whose latest row wins (sql/migrations/004_rollout.sql).  Works on ClickHouse
18.16 and chDB alike.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controller.rollout.state import HostReport, RolloutState, WindowStats
from controller.store import Store
from controller.store.sql import query, splice
from schemas.congestion_pb2 import CongestionConfig


def _objects(values: Sequence[Any]) -> np.ndarray:
    col = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        col[i] = v
    return col


def _strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, float) and math.isnan(value):
        return ()
    return tuple(str(v) for v in list(value))


def _int(value: Any) -> int:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return 0
    return int(value)


def _float(value: Any) -> float:
    if value is None:
        return 0.0
    out = float(value)
    return 0.0 if math.isnan(out) else out


@dataclass
class ConfigRecord:
    pop: str
    version: int
    status: str  # PUBLISHED, REJECTED or PUBLISH_FAILED (controller/store/outcomes.py)
    kind: str
    config: CongestionConfig
    created_ns: int
    added: int = 0
    removed: int = 0
    changed: int = 0
    reasons: list[str] = field(default_factory=list)
    fingerprint: str = ""


def record_config(store: Store, rec: ConfigRecord) -> None:
    store.insert_columns(
        "config_versions",
        {
            "created_at": np.array([rec.created_ns // 10**9], dtype=np.uint32),
            "created_ns": np.array([rec.created_ns], dtype=np.uint64),
            "pop": [rec.pop],
            "version": np.array([rec.version], dtype=np.uint64),
            "round_id": [rec.config.round_id],
            "status": [rec.status],
            "kind": [rec.kind],
            "target_hosts": _objects([list(rec.config.target_hosts)]),
            "entries": np.array([len(rec.config.entries)], dtype=np.uint32),
            "added": np.array([rec.added], dtype=np.uint32),
            "removed": np.array([rec.removed], dtype=np.uint32),
            "changed": np.array([rec.changed], dtype=np.uint32),
            "reasons": _objects([list(rec.reasons)]),
            "kill_switch": np.array([int(rec.config.kill_switch)], dtype=np.uint8),
            "fingerprint": [rec.fingerprint],
            "key_id": [rec.config.key_id],
            "config": [base64.b64encode(rec.config.SerializeToString(deterministic=True)).decode()],
        },
    )


def load_published_config(store: Store, pop: str, version: int) -> CongestionConfig | None:
    rows = store.query_rows(
        query("rollout_published_config"),
        {"pop": pop, "version": version},
    )
    if not rows:
        return None
    return CongestionConfig.FromString(base64.b64decode(rows[0][0]))


def config_history(store: Store, pop: str, limit: int = 20) -> list[tuple[Any, ...]]:
    """(version, status, kind, entries, target_hosts, reasons, created_ns), newest first."""
    return store.query_rows(
        query("rollout_config_history"),
        {"pop": pop, "limit": limit},
    )


def last_version(store: Store, pop: str) -> int:
    """The highest version published for the POP or reported in force by its agents (0 = none)."""
    row = store.query_rows(query("rollout_next_version"), {"pop": pop})[0]
    return max(_int(row[0]), _int(row[1]))


_STATE_COLUMNS = (
    "pop",
    "phase",
    "event",
    "rollout_id",
    "stable_version",
    "candidate_version",
    "wave_version",
    "wave_hosts",
    "wave_started_ns",
    "candidate_fingerprint",
    "failed_fingerprint",
    "failed_at_ns",
    "reason",
    "updated_ns",
)


def load_state(store: Store, pop: str) -> RolloutState:
    rows = store.query_rows(query("rollout_state_latest"), {"pop": pop})
    if not rows:
        return RolloutState(pop=pop)
    return _state(rows[0])


def rollbacks(store: Store, since_ns: int, until_ns: int) -> list[RolloutState]:
    """The rollback rows (event rollback or rollback_rejected) of every POP written in
    [since_ns, until_ns), oldest first: candidate_version is the version that failed its gate,
    wave_version the one re-published with the stable entries, reason why."""
    rows = store.query_rows(query("rollout_rollbacks"), {"since_ns": since_ns, "until_ns": until_ns})
    return [_state(row) for row in rows]


def _state(row: Sequence[Any]) -> RolloutState:
    r = dict(zip(_STATE_COLUMNS, row, strict=True))
    return RolloutState(
        pop=str(r["pop"]),
        phase=str(r["phase"]),
        event=str(r["event"]),
        rollout_id=str(r["rollout_id"]),
        stable_version=_int(r["stable_version"]),
        candidate_version=_int(r["candidate_version"]),
        wave_version=_int(r["wave_version"]),
        wave_hosts=_strings(r["wave_hosts"]),
        wave_started_ns=_int(r["wave_started_ns"]),
        candidate_fingerprint=str(r["candidate_fingerprint"]),
        failed_fingerprint=str(r["failed_fingerprint"]),
        failed_at_ns=_int(r["failed_at_ns"]),
        reason=str(r["reason"]),
        updated_ns=_int(r["updated_ns"]),
    )


def save_state(store: Store, state: RolloutState) -> None:
    store.insert_columns(
        "rollout_waves",
        {
            "updated_at": np.array([state.updated_ns // 10**9], dtype=np.uint32),
            "updated_ns": np.array([state.updated_ns], dtype=np.uint64),
            "pop": [state.pop],
            "rollout_id": [state.rollout_id],
            "phase": [state.phase],
            "event": [state.event],
            "stable_version": np.array([state.stable_version], dtype=np.uint64),
            "candidate_version": np.array([state.candidate_version], dtype=np.uint64),
            "wave_version": np.array([state.wave_version], dtype=np.uint64),
            "wave_hosts": _objects([list(state.wave_hosts)]),
            "wave_started_ns": np.array([state.wave_started_ns], dtype=np.uint64),
            "candidate_fingerprint": [state.candidate_fingerprint],
            "failed_fingerprint": [state.failed_fingerprint],
            "failed_at_ns": np.array([state.failed_at_ns], dtype=np.uint64),
            "reason": [state.reason[:2000]],
        },
    )


def rollout_pops(store: Store) -> list[str]:
    return sorted(str(r[0]) for r in store.query_rows(query("rollout_pops")))


def known_pops(store: Store) -> list[str]:
    rows = store.query_rows(query("rollout_pops_with_data"))
    return sorted({str(r[0]) for r in rows})


def _report(row: Sequence[Any]) -> HostReport:
    return HostReport(
        host=str(row[0]),
        version=_int(row[1]),
        applied_version=_int(row[2]),
        result=str(row[3]),
        errors=_strings(row[4]),
        mem_available_bytes=_int(row[5]),
        load1=_float(row[6]),
        available_cc=_strings(row[7]),
        reported_ns=_int(row[8]),
        received_ns=_int(row[9]),
    )


def pending_reports(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, HostReport]]:
    """The latest of status rows (statuses.status_rows, in topic order) per POP and host."""
    out: dict[str, dict[str, HostReport]] = {}
    for r in rows:
        out.setdefault(str(r["pop"]), {})[str(r["host"])] = HostReport(
            host=str(r["host"]),
            version=int(r["version"]),
            applied_version=int(r["applied_version"]),
            result=str(r["result"]),
            errors=tuple(r["errors"]),
            mem_available_bytes=int(r["mem_available_bytes"]),
            load1=float(r["load1"]),
            available_cc=tuple(r["available_cc"]),
            reported_ns=int(r["reported_ns"]),
            received_ns=0,  # no round has read it yet
        )
    return out


def latest_reports(store: Store, pop: str, since_ns: int) -> dict[str, HostReport]:
    rows = store.query_rows(query("rollout_latest_reports"), {"pop": pop, "since_ns": since_ns})
    return {str(r[0]): _report(r) for r in rows}


def reports_since(store: Store, pop: str, since_ns: int) -> list[HostReport]:
    rows = store.query_rows(query("rollout_reports_since"), {"pop": pop, "since_ns": since_ns})
    return [_report(r) for r in rows]


def p10_window(
    store: Store, pop: str, hosts: Sequence[str], start_ns: int, end_ns: int, prefixes: Sequence[str] | None = None
) -> WindowStats:
    """Samples and p10 delivery rate of the hosts' qualifying flows in [start_ns, end_ns)."""
    if not hosts or end_ns <= start_ns:
        return WindowStats(0, 0.0)
    sql = query("rollout_p10")
    params: dict[str, Any] = {
        "pop": pop,
        "hosts": list(hosts),
        "start_ns": start_ns,
        "end_ns": end_ns,
        "start_s": start_ns // 10**9,
        "end_s": end_ns // 10**9 + 1,
    }
    if prefixes is None:
        row = store.query_rows(splice(sql, {"prefix_filter": ""}), params)[0]
    else:
        if not prefixes:
            return WindowStats(0, 0.0)
        # the prefixes travel as a data table: the statement does not grow with them
        sql = splice(sql, {"prefix_filter": query("rollout_p10_prefix_filter")})
        row = store.query_rows_with(sql, {"prefix": ("String", list(prefixes))}, params)[0]
    return WindowStats(_int(row[0]), _float(row[1]))
