"""Keep the scoring cache filled as data arrives: `CacheKeeper.tick` refreshes the window that
ends at the last closed bucket (controller/statistics/cache.py: new and changed buckets only),
and `keep` calls it every `every` seconds until stopped.

`dyncc ingest` runs `keep` on a thread of its own, with a store connection of its own, for the
default scoring's statistics, so the cache holds every closed bucket whether or not a
controller runs: a controller started (or restarted) on a store with data finds the cache
filled and builds its scoring state from it, instead of merging every bucket of its window
from the rollup.  A failed tick (the store away) is logged at a bounded rate and retried at
the next; the keeper never stops the loader.  Its work is derived data: a tick lost or run
twice (two loaders) changes no score.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from controller.statistics.cache import drop_old_cache, refresh
from controller.statistics.source import DEFAULT_LOOKBACK_SECONDS, CacheSource, Window
from dyncc_common.errors import StoreError

if TYPE_CHECKING:
    from controller.store import Store

log = logging.getLogger("dyncc.statistics")


@dataclass(frozen=True)
class Tick:
    """What one tick did: (pop, bucket)s computed into the cache, those current, its time."""

    computed: int
    buckets: int
    seconds: float


@dataclass
class CacheKeeper:
    store: Store
    source: CacheSource = field(default_factory=CacheSource)
    lookback_seconds: int = DEFAULT_LOOKBACK_SECONDS

    def tick(self, now: dt.datetime | None = None) -> Tick:
        """Refresh the cache for the window ending at the last bucket boundary before `now`."""
        started = time.perf_counter()
        now = now or dt.datetime.now(dt.UTC)
        window = Window.ending_before(now, self.source.bucket_seconds, self.lookback_seconds)
        version = time.time_ns()  # unique per tick; a round's versions are its own times
        keys = refresh(self.store, self.source, window, "", version)
        drop_old_cache(self.store, window)
        computed = sum(k.version == version for k in keys)
        return Tick(computed, len(keys), time.perf_counter() - started)


def keep(
    keeper: CacheKeeper,
    every: float,
    stopped: Callable[[float], bool],
    on_tick: Callable[[Tick], None] = lambda _: None,
    on_error: Callable[[StoreError], None] = lambda _: None,
) -> None:
    """Tick every `every` seconds until stopped(timeout) (a wait that returns True once stopped).

    A StoreError is passed to on_error, logged (once per minute at most) and retried at the
    next tick."""
    last_logged = 0.0
    while True:
        try:
            tick = keeper.tick()
        except StoreError as exc:
            on_error(exc)
            if time.monotonic() - last_logged >= 60:
                log.warning("scoring cache: tick failed, retrying every %.0f s: %s", every, exc)
                last_logged = time.monotonic()
        else:
            on_tick(tick)
            if tick.computed:
                log.info(
                    "scoring cache: %d (pop, bucket)s computed, %d current, %.2f s",
                    tick.computed,
                    tick.buckets,
                    tick.seconds,
                )
        if stopped(every):
            return
