"""The scoring cache (scoring_cache): per (pop, bucket, prefix) statistics, versioned.

`refresh` compares per (pop, bucket) sample counts in the source (the 5-minute rollup, or raw
tcpinfo when the bucket / qualifying threshold differ from the rollup's) with the cache, over
the whole window on every call (one count query); buckets that are new or changed get their
per-prefix statistics recomputed into the cache under a new version, recorded in
scoring_versions after the rows (a reader never sees a version before its rows).  So the keys a
call returns are, for every bucket of the window, computed from at least the samples the source
held when the call began: late data for any bucket (a backlog, a killed loader's redelivery) is
folded in by the next call, never left behind.  The data is append-only, so a bucket whose count
is unchanged is unchanged.  On a cluster every shard computes its own prefixes' rows at the same time.
Writers may run side by side (a round of `dyncc control`, the keeper of each `dyncc ingest`):
each writes whole (pop, bucket)s under its own version, so a duplicate costs work, never a
wrong row.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from controller.statistics.source import CacheSource, Window, epoch_seconds
from controller.store.sql import query, splice, strip_comments, values_list

if TYPE_CHECKING:
    from controller.store import Store

log = logging.getLogger("dyncc.statistics")

T = TypeVar("T")
REFRESH_CHUNK = 4  # (pop, bucket)s per cache INSERT


@dataclass(frozen=True)
class CacheKey:
    pop: str
    bucket_ts: int  # epoch seconds of the bucket start
    version: int


def params(source: CacheSource, window: Window, pop: str, version: int = 0) -> dict[str, Any]:
    """The parameters of the cache's SQL (sql/queries/scoring_cached.sql, _fresh_*, _refresh_*)."""
    return {
        "pop": pop,
        "source": source.name,
        "start": window.start,
        "end": window.end,
        "bucket_seconds": source.bucket_seconds,
        "min_bytes": source.min_bytes,
        "include_app_limited": source.include_app_limited,
        "version": version,
    }


def _counts(store: Store, sql: str, p: dict[str, Any]) -> list[tuple[Any, ...]]:
    """(pop, bucket epoch seconds, the integer columns...) per row of a (pop, bucket, ...) query.

    Rows, not a DataFrame: `dyncc ingest` keeps the cache, and on a ClickHouse server a
    DataFrame query would load pandas into the loader (docs/performance.md, "Loader memory")."""
    out = []
    for pop, bucket, *extra in store.query_rows(sql, p):
        name = pop.decode() if isinstance(pop, bytes) else str(pop)
        out.append((name, epoch_seconds(_to_datetime(bucket)), *(int(v) for v in extra)))
    return out


def _to_datetime(value: Any) -> dt.datetime:
    """A DateTime value as the back end returns it (naive: UTC) as a datetime."""
    if isinstance(value, dt.datetime):  # the server's rows, and chDB's pandas Timestamps
        return value
    import pandas as pd  # numpy datetime64 (chDB): its rows come through pandas anyway

    ts = pd.Timestamp(value)
    if ts.tzinfo is None:
        ts = ts.tz_localize("UTC")
    return ts.to_pydatetime()


def refresh(store: Store, source: CacheSource, window: Window, pop: str, version: int) -> list[CacheKey]:
    """Bring the scoring_cache cache up to date for the window; return the current keys.

    Every bucket of the window is compared with the source at every call (late data far behind
    included: before, only the newest 6 buckets and one older slice per call were, and a bucket
    55 minutes back kept a partial count for the better part of an hour).  Empty buckets are
    recorded too (samples 0) on the first call, so a POP's empty buckets are not recomputed.
    """
    p = params(source, window, pop, version)
    cached: dict[tuple[str, int], tuple[int, int]] = {}
    for pop_, bucket, ver, samples in _counts(store, strip_comments(query("scoring_cached")), p):
        if (pop_, bucket) not in cached or ver > cached[(pop_, bucket)][0]:
            cached[(pop_, bucket)] = (ver, samples)
    first = epoch_seconds(window.start)
    fresh_sql = strip_comments(query(f"scoring_fresh_{source.kind}"))
    fresh = {(r[0], r[1]): r[2] for r in _counts(store, fresh_sql, p)}
    for key, (_, samples) in cached.items():  # buckets that vanished from the source: empty now
        if key not in fresh and samples:
            fresh[key] = 0
    # remember the empty buckets of every POP seen, so they are recorded once, not recomputed
    for p_ in {k[0] for k in cached} | {k[0] for k in fresh}:
        for i in range(window.buckets):
            key = (p_, first + i * source.bucket_seconds)
            if key not in cached:
                fresh.setdefault(key, 0)
    stale = sorted(k for k, n in fresh.items() if k not in cached or cached[k][1] != n)
    insert, rows_sql = query("scoring_refresh_insert"), query(f"scoring_refresh_{source.kind}")
    for i in range(0, len(stale), REFRESH_CHUNK):
        chunk = stale[i : i + REFRESH_CHUNK]
        with_data = [k for k in chunk if fresh[k]]
        if with_data:  # a few buckets per INSERT bound the memory of merging their states
            keys = values_list(with_data)  # at most REFRESH_CHUNK tuples
            sql = splice(insert, {"source": splice(rows_sql, {"keys": keys})})

            def insert_on(shard: Store, sql: str = sql) -> None:
                shard.execute(sql, p)
                shard.sync_replicas("scoring_cache")  # the scores read it through the Distributed table

            on_every_shard(store, insert_on)
        record_versions(store, source, chunk, version, [fresh[k] for k in chunk])
    if stale:
        log.debug("scoring cache: recomputed %d (pop, bucket)s", len(stale))
    current = {k: v for k, (v, n) in cached.items() if n}
    current.update({k: version for k in stale if fresh[k]})
    return sorted((CacheKey(k[0], k[1], v) for k, v in current.items()), key=lambda k: (k.pop, k.bucket_ts))


def on_every_shard(store: Store, op: Callable[[Store], T]) -> list[T]:
    """op on each shard's store (its own rows), at the same time on a cluster; on one server, op on
    the store itself."""
    shards = store.shard_stores()
    if len(shards) == 1:
        return [op(shards[0])]
    with ThreadPoolExecutor(max_workers=len(shards)) as pool:
        return list(pool.map(op, shards))


def record_versions(
    store: Store, source: CacheSource, keys: list[tuple[str, int]], version: int, samples: list[int]
) -> None:
    """The versions computed for `keys` ((pop, bucket epoch seconds)), as a bulk insert (the Native
    insert on a server: no pandas in `dyncc ingest`, which keeps the cache)."""
    store.bulk_insert(
        "scoring_versions",
        {
            "pop": np.array([k[0] for k in keys], dtype=object),
            "source": np.array([source.name] * len(keys), dtype=object),
            "bucket": np.array([k[1] for k in keys], dtype="uint32"),  # DateTime: epoch seconds
            "version": np.full(len(keys), version, dtype="uint64"),
            "samples": np.array(samples, dtype="uint64"),
        },
        len(keys),
    )


def drop_old_cache(store: Store, window: Window, keep_days: int = 2) -> None:
    """Drop scoring_cache partitions (days) older than the window minus keep_days, on every shard."""
    cutoff = (window.start - dt.timedelta(days=keep_days)).strftime("%Y%m%d")

    def drop(shard: Store) -> None:
        for (partition,) in shard.query_rows(query("scoring_cache_partitions"), {"db": shard.database}):
            text = str(partition).strip("'")
            if text.isdigit() and text < cutoff:
                shard.execute(query("scoring_drop_cache_partition"), {"partition": int(text)})

    on_every_shard(store, drop)
