"""Run one lab end to end (store, control step, loop) and summarise it; used by `dyncc lab` and
`dyncc demo`.

The summary answers what a person watching the lab wants to know: which prefixes
were selected and in which round, which owned routes the edge holds at the end,
and the bbr share of new sockets from routed prefixes against the others.
`check_options` validates LabOptions (ConfigError, one line) before anything is
built; run_lab calls it first.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from controller.lab.control import make_control_factory
from controller.lab.loop import Lab, LabOptions, LabResult
from controller.store import Store, open_store
from controller.store.migrate import apply_migrations
from dyncc_common.errors import ConfigError
from dyncc_common.names import check_brokers, check_pop
from dyncc_common.runtime import StopFlag

log = logging.getLogger("dyncc.lab")


@dataclass
class LabSummary:
    result: LabResult
    selected: list[str] = field(default_factory=list)  # decision select/keep in the last round
    routes: dict[str, str] = field(default_factory=dict)  # owned routes at the end
    bbr_routed: tuple[int, int] = (0, 0)  # (bbr, total) new sockets, routed prefixes
    bbr_others: tuple[int, int] = (0, 0)

    def summary_text(self) -> str:
        r = self.result
        topo = r.topology
        profile = {c.prefix: c.profile for c in topo.clients}
        lines = [
            f"lab {topo.run_id}: {len(r.rounds)} rounds, {r.polls} polls, {r.rows} socket samples"
            + (f", stopped by {r.stopped_by}" if r.stopped_by else "")
        ]
        if self.selected:
            first = ", ".join(
                f"{p} ({profile.get(p, '?')}, round {r.first_selected.get(p, '?')})" for p in self.selected
            )
            lines.append(f"selected for bbr: {first}")
        else:
            lines.append("selected for bbr: none")
        lines.append(
            "routes on the edge (proto 250): "
            + (", ".join(f"{p} congctl {cc}" for p, cc in sorted(self.routes.items())) or "none")
        )
        lines.append(
            f"bbr on new sockets: routed prefixes {_share(self.bbr_routed)}, other prefixes {_share(self.bbr_others)}"
        )
        lines.append("namespaces left: " + (" ".join(r.leftover_namespaces) or "none"))
        return "\n".join(lines)


def _share(pair: tuple[int, int]) -> str:
    bbr, total = pair
    return f"{bbr}/{total} ({bbr / total * 100:.0f}%)" if total else "no new sockets"


def summarize(result: LabResult) -> LabSummary:
    """Selections and routes of the last round; bbr shares over the rounds after routes appeared."""
    if not result.rounds:
        return LabSummary(result)
    last = result.rounds[-1]
    selected = sorted(p for p, s in last.outcome.scores.items() if s.decision in ("select", "keep"))
    routes = dict(last.outcome.routes)
    routed, others = Counter[str](), Counter[str]()
    for rec in result.rounds:
        # a round's new sockets met the routes installed at the end of the previous round
        prev_routes = _routes_before(result, rec.round_no)
        for row in rec.rows:
            (routed if prev_routes.get(row.prefix) == "bbr" else others).update(row.new_sockets)
    pair = lambda c: (sum(n for cc, n in c.items() if cc.startswith("bbr")), sum(c.values()))  # noqa: E731
    return LabSummary(result, selected, routes, pair(routed), pair(others))


def _routes_before(result: LabResult, round_no: int) -> dict[str, str]:
    for rec in result.rounds:
        if rec.round_no == round_no - 1:
            return rec.outcome.routes
    return {}


# tc(8) rates: bits (bit, kbit, mbit, gbit, tbit, IEC kibit...) or bytes (bps, kbps, ...) per second
_TC_RATE = re.compile(r"^(\d+(?:\.\d+)?)(?:[kmgt]i?)?(?:bit|bps)$|^(\d+)$", re.IGNORECASE)


def check_options(opts: LabOptions) -> None:
    """ConfigError (one line) for options the lab would only trip over after building namespaces."""
    rate = opts.shaping.rate
    match = _TC_RATE.match(rate)
    if not match or float(match.group(1) or match.group(2)) <= 0:
        raise ConfigError(f"bad --rate {rate!r}: a tc rate such as 4mbit, 500kbit or 1gbit")
    check_pop(opts.pop)
    if opts.kafka is not None:
        check_brokers(opts.kafka, "--kafka")
    if not opts.run_id.isalnum() or len(opts.run_id) > 8:
        raise ConfigError(f"bad --run-id {opts.run_id!r}: 1-8 letters or digits")
    if opts.record is not None:
        record = Path(opts.record)
        if record.is_dir():
            raise ConfigError(f"bad --record {record}: a directory, give a file name")
        if not record.parent.is_dir() or not os.access(record.parent, os.W_OK | os.X_OK):
            raise ConfigError(f"bad --record {record}: directory {record.parent} missing or not writable")


def open_lab_store(url: str) -> Store:
    store = open_store(url)
    apply_migrations(store)
    return store


def run_lab(opts: LabOptions, url: str, workdir: Path, stop: StopFlag, out: TextIO | None = None) -> LabSummary:
    """Check the options, open the store, run the lab with Ctrl-C/SIGTERM handling, and summarise."""
    check_options(opts)
    store = open_lab_store(url)
    log.info("lab store %s", store.url.redacted())
    lab = Lab(opts, store, make_control_factory(workdir), out=out)
    with stop.installed():
        result = lab.run(stop)
    return summarize(result)
