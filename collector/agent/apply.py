"""All-or-nothing apply of a desired prefix set onto the owned routes.

One apply: dump the main table, plan (collector/agent/plan.py), write deletes
then adds, read every owned route back and compare with the plan.  Any write
error or read-back difference restores the owned set exactly as it was before
the apply (from the routes dumped at the start) and reports failure.
Reconcile is the same operation with the desired set currently in force.
`Applier` is the interface the agent needs; `--enforce bpf` has its own applier
(collector/agent/bpf/apply.py) with the same guarantees.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from collector.agent.plan import Plan, Route, Wanted, diff_owned, make_plan, split_table, verify_readback
from collector.agent.routes import RouteTable, RouteWriteError, ops_for
from schemas.congestion_pb2 import HostHealth


@dataclass
class ApplyOutcome:
    ok: bool
    added: int = 0
    removed: int = 0
    replaced: int = 0
    kept: int = 0
    owned: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    rolled_back: bool = False
    seconds: float = 0.0

    @property
    def changes(self) -> int:
        return self.added + self.removed + self.replaced

    def summary(self) -> str:
        return (
            f"added={self.added} replaced={self.replaced} removed={self.removed} kept={self.kept} "
            f"skipped={len(self.skipped)} owned={self.owned} in {self.seconds:.3f}s"
        )


class Applier(Protocol):
    """What the agent needs from an enforcement mode."""

    def apply(self, wanted: Mapping[str, Wanted]) -> ApplyOutcome: ...

    def owned_count(self) -> int: ...

    def in_force(self) -> dict[str, Wanted]: ...

    def describe_health(self, health: HostHealth) -> None: ...

    def close(self) -> None: ...


class RouteApplier:
    def __init__(self, table: RouteTable) -> None:
        self.table = table

    def owned(self) -> dict[str, Route]:
        return split_table(self.table.dump(owned_only=True), self.table.proto).owned

    def owned_count(self) -> int:
        return len(self.owned())

    def in_force(self) -> dict[str, Wanted]:
        """Owned routes with an algorithm, as wanted prefixes."""
        return {p: Wanted(p, r.algorithm, r.lock) for p, r in self.owned().items() if r.algorithm}

    def describe_health(self, health: HostHealth) -> None:
        health.enforce = "route"

    def close(self) -> None:
        self.table.close()

    def apply(self, wanted: Mapping[str, Wanted]) -> ApplyOutcome:
        started = time.monotonic()
        try:
            before = split_table(self.table.dump(), self.table.proto)
        except OSError as exc:  # nothing written yet: nothing to roll back
            return ApplyOutcome(
                ok=False, errors=[f"cannot read the routing table: {exc}"], seconds=time.monotonic() - started
            )
        plan = make_plan(before, wanted)
        outcome = ApplyOutcome(ok=True, skipped=plan.skipped)
        try:
            if plan.changes:
                self.table.write(ops_for(plan.remove, plan.add))
            after = split_table(self.table.dump(owned_only=True), self.table.proto)
            problems = verify_readback(plan.target, after)
            if problems:
                raise RouteWriteError("read-back: " + "; ".join(problems))
        except (RouteWriteError, OSError) as exc:
            outcome.ok = False
            outcome.errors.append(str(exc))
            outcome.errors.extend(self._restore(before.owned))
            outcome.rolled_back = True
            outcome.owned = len(before.owned)
        else:
            self._count(outcome, plan)
            outcome.owned = len(after.owned)
        outcome.seconds = time.monotonic() - started
        return outcome

    @staticmethod
    def _count(outcome: ApplyOutcome, plan: Plan) -> None:
        outcome.added, outcome.removed, outcome.replaced = plan.added, plan.removed, plan.replaced
        outcome.kept = len(plan.keep)

    def _restore(self, previous: Mapping[str, Route]) -> list[str]:
        """Put the owned set back exactly as `previous`; returns rollback errors (empty = restored)."""
        try:
            current = split_table(self.table.dump(owned_only=True), self.table.proto)
            remove, add, _ = diff_owned(current.owned, previous)
            self.table.write(ops_for([*remove, *current.duplicates], add))
            after = split_table(self.table.dump(owned_only=True), self.table.proto)
            problems = verify_readback(previous, after)
        except (RouteWriteError, OSError) as exc:
            problems = [str(exc)]
        return [f"rollback incomplete: {p}" for p in problems]
