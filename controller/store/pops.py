"""Is a POP named on the command line one the store knows?  (`control --pop`, `explain`,
`kill-switch`, `report --pop`.)

A POP is known when it has telemetry or a published config (sql/queries/store_known_pops.sql).
`unknown_pop_message` is the pure check: None for a known POP, else the one-line reason naming
the known POPs (at most `limit` of them, then how many more).  `require_known_pops` runs the
one query and raises ConfigError (exit 2) for the first unknown POP.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from controller.store.sql import query
from dyncc_common.errors import ConfigError

if TYPE_CHECKING:
    from controller.store import Store

SHOWN = 20


def unknown_pop_message(pop: str, known: Sequence[str], limit: int = SHOWN, hint: str = "") -> str | None:
    """None when `pop` is in `known`, else the reason, naming the first `limit` known POPs."""
    if pop in known:
        return None
    head = f"unknown POP {pop!r}: no telemetry and no published config"
    tail = f" ({hint})" if hint else ""
    if not known:
        return f"{head}; the store knows no POP yet{tail}"
    shown = ", ".join(known[:limit])
    more = len(known) - limit
    return f"{head}; known POPs: {shown}" + (f" and {more} more" if more > 0 else "") + tail


def known_pops(store: Store) -> list[str]:
    """Every POP with telemetry or a published config, sorted."""
    return [str(row[0]) for row in store.query_rows(query("store_known_pops"))]


def require_known_pops(store: Store, pops: Sequence[str], hint: str = "") -> None:
    """ConfigError naming the known POPs when one of `pops` is unknown (one query)."""
    if not pops:
        return
    known = known_pops(store)
    for pop in pops:
        message = unknown_pop_message(pop, known, hint=hint)
        if message is not None:
            raise ConfigError(message)
