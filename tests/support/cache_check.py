"""Compare the scoring cache with the raw data: where do they differ?

`cache_differences` reads, per (pop, bucket) of [start, end), the newest version the cache
holds for the default scoring's statistics (scoring_versions) and that version's rows
(scoring_cache), and counts the same (pop, bucket, prefix)s from raw `tcpinfo` (every sample,
and the qualifying ones: bytes_acked > 102,400 and not app-limited).  It returns every
(pop, bucket, prefix) whose cached (samples, qualifying) are not the raw ones: empty when the
cache equals the raw data for every bucket of the range.  The raw side does not go through the
rollup or the cache's SQL, so it is an independent check of both.
"""

from __future__ import annotations

from typing import Any

from controller.statistics.source import ROLLUP_MIN_BYTES, CacheSource
from controller.store import Store

Key = tuple[str, int, str]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def cache_differences(
    store: Store, start: int, end: int, source: CacheSource | None = None
) -> dict[Key, tuple[tuple[int, int], tuple[int, int]]]:
    """{(pop, bucket, prefix): ((cached samples, qualifying), (raw samples, qualifying))} where
    they differ, over buckets [start, end) (epoch seconds, 5-minute buckets)."""
    name = (source or CacheSource()).name
    newest: dict[tuple[str, int], int] = {}
    for pop, bucket, version in store.query_rows(
        "SELECT pop, toUInt32(bucket), version FROM scoring_versions "
        f"WHERE source = '{name}' AND bucket >= toDateTime({start}) AND bucket < toDateTime({end})"
    ):
        key = (_text(pop), int(bucket))
        newest[key] = max(newest.get(key, 0), int(version))
    cached: dict[Key, tuple[int, int]] = {}
    for pop, bucket, version, prefix, samples, qualifying in store.query_rows(
        "SELECT pop, toUInt32(bucket), version, prefix, samples, qualifying FROM scoring_cache "
        f"WHERE source = '{name}' AND bucket >= toDateTime({start}) AND bucket < toDateTime({end})"
    ):
        if newest.get((_text(pop), int(bucket))) == int(version):
            cached[(_text(pop), int(bucket), _text(prefix))] = (int(samples), int(qualifying))
    raw: dict[Key, tuple[int, int]] = {}
    for pop, bucket, prefix, samples, qualifying in store.query_rows(
        "SELECT pop, intDiv(toUInt32(time), 300) * 300 AS b, prefix, count(), "
        f"countIf(bytes_acked > {ROLLUP_MIN_BYTES} AND app_limited = 0) FROM tcpinfo "
        f"WHERE time >= toDateTime({start}) AND time < toDateTime({end}) GROUP BY pop, b, prefix"
    ):
        raw[(_text(pop), int(bucket), _text(prefix))] = (int(samples), int(qualifying))
    none = (0, 0)
    return {
        k: (cached.get(k, none), raw.get(k, none))
        for k in cached.keys() | raw.keys()
        if cached.get(k, none) != raw.get(k, none)
    }
