"""Score a round from the incremental scoring state instead of re-reading the window.

`score_incrementally(store, cfg, window, pop, keys, generation)` returns what
controller/scoring/query.py `score_prefixes` returns for the same cache keys (the same
columns, the same values: the test compares them exactly), at the cost of the buckets that
changed since the last round instead of the whole window:

  1. the committed generation of each POP's state and the keys it holds (scoring_state_keys);
     a generation whose partition is missing on a shard counts as none;
  2. the plan (controller/scoring/state_plan.py): keys to add, keys to subtract, per POP;
  3. the thresholds of the added keys, from every shard (the one global step);
  4. on every shard at once (Store.shard_stores(): the store itself on one server), the new
     generation: the base generation's rows plus and minus the contributions of the keys, over
     the shard's own prefixes (sql/queries/scoring_state_update.sql);
  5. the commit: the generation's keys and thresholds in scoring_state_keys (one INSERT);
  6. the scores from the generations in force, the masks turned from bit (bucket number mod 64)
     to bit (bucket - window start) / bucket length, the flaps counted from them.
Generations no POP is on any more are dropped (every shard).  A window of more than 64 buckets
does not fit the masks: the caller scores it in full.  A round that fails between 4 and 5 leaves
an uncommitted generation that the next round ignores and drops.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from controller.scoring.flaps import MASK_BUCKETS, flap_ratio, transitions
from controller.scoring.query import base_params, normalize_scores
from controller.scoring.settings import ScoringSettings
from controller.scoring.state_plan import Committed, PopPlan, StatePlan, plan_update
from controller.statistics.cache import CacheKey, on_every_shard
from controller.statistics.source import Window, epoch_seconds, from_epoch
from controller.store.sql import query, splice, strip_comments, values_list

if TYPE_CHECKING:
    import pandas as pd

    from controller.store import Store

__all__ = ["drop_old_state", "score_incrementally", "state_params"]

log = logging.getLogger("dyncc.scoring")

MINUS_ONE = (1 << 64) - 1  # -1 modulo 2^64: the sign of a contribution that leaves


def state_params(cfg: ScoringSettings) -> str:
    """The settings the state's flags and bits depend on (a change builds a new state)."""
    return f"b{cfg.bucket_seconds}:n{cfg.min_samples}:q{float(cfg.threshold_quantile)!r}:r{float(cfg.min_rtt_ms)!r}"


def committed_state(store: Store, cfg: ScoringSettings, pop: str) -> dict[str, Committed]:
    """Each POP's newest committed generation whose rows every shard still holds."""
    return _state_on_shards(store, cfg, pop)[0]


def _state_on_shards(store: Store, cfg: ScoringSettings, pop: str) -> tuple[dict[str, Committed], int]:
    """committed_state, and the newest generation any shard holds (committed or not)."""
    p = {"source": cfg.source, "params": state_params(cfg), "pop": pop}
    rows = store.query_rows(strip_comments(query("scoring_state_committed")), p)
    found: dict[str, tuple[int, dict[tuple[int, int], float]]] = {}
    for pop_, generation, bucket, version, threshold in rows:
        name = pop_.decode() if isinstance(pop_, bytes) else str(pop_)
        entry = found.setdefault(name, (int(generation), {}))
        entry[1][(_epoch(bucket), int(version))] = float(threshold)
    per_shard = on_every_shard(store, _generations)
    held = set.intersection(*per_shard)
    newest = max((g for gens in per_shard for g in gens), default=0)
    return {pop_: Committed(g, keys) for pop_, (g, keys) in found.items() if g in held}, newest


def _generations(shard: Store) -> set[int]:
    rows = shard.query_rows(query("scoring_state_partitions"), {"db": shard.database})
    return {int(str(partition).strip("'")) for (partition,) in rows}


def _epoch(value: Any) -> int:
    if isinstance(value, dt.datetime):
        return epoch_seconds(value)
    import pandas as pd

    ts = pd.Timestamp(value)
    return int(ts.tz_localize("UTC").timestamp() if ts.tzinfo is None else ts.timestamp())


def _thresholds(
    store: Store, cfg: ScoringSettings, window: Window, keys: Sequence[tuple[str, int, int]]
) -> dict[tuple[str, int, int], float]:
    if not keys:
        return {}
    sql = splice(query("scoring_state_thresholds"), {"keys": values_list(keys)})
    p = {**base_params(cfg, window, ""), **_bounds([k[1] for k in keys], cfg)}
    out = {(str(k[0]), int(k[1]), int(k[2])): 0.0 for k in keys}  # no row: the version has no data
    for pop_, bucket, version, threshold in store.query_rows(sql, p):
        name = pop_.decode() if isinstance(pop_, bytes) else str(pop_)
        out[(name, _epoch(bucket), int(version))] = float(threshold)
    return out


def _bounds(buckets: Sequence[int], cfg: ScoringSettings) -> dict[str, dt.datetime]:
    return {"start": from_epoch(min(buckets)), "end": from_epoch(max(buckets) + cfg.bucket_seconds)}


def _update_sql(
    plans: Sequence[PopPlan], thresholds: dict[tuple[str, int, int], float], cfg: ScoringSettings
) -> tuple[str, dict[str, Any]]:
    """scoring_state_update.sql for the POPs being built, and its parameters."""
    bases = [(p.pop, p.base) for p in plans if p.base]
    added = [(p.pop, b, v, thresholds[(p.pop, b, v)]) for p in plans for b, v in p.added]
    removed = [(p.pop, b, v, t) for p in plans for b, v, t in p.removed]
    parts: list[str] = []
    params: dict[str, Any] = {}
    if bases:
        parts.append(splice(query("scoring_state_base"), {"bases": values_list(bases)}))
    contributions = query("scoring_state_contributions")
    for name, keys, sign, fsign in (("add", added, 1, 1.0), ("sub", removed, MINUS_ONE, -1.0)):
        if not keys:
            continue
        part = splice(contributions, {"keys": values_list(keys)})
        # each branch has its own bounds and sign: the parameters are renamed per branch
        for param in ("start", "end", "sign", "fsign"):
            part = part.replace(f"%({param})s", f"%({name}_{param})s")
        parts.append(part)
        bounds = _bounds([k[1] for k in keys], cfg)
        params.update({f"{name}_start": bounds["start"], f"{name}_end": bounds["end"]})
        params.update({f"{name}_sign": sign, f"{name}_fsign": fsign})
    sql = splice(query("scoring_state_update"), {"parts": "\nUNION ALL\n".join(parts)})
    return sql, params


def build(
    store: Store,
    cfg: ScoringSettings,
    window: Window,
    plan: StatePlan,
    generation: int,
    current: dict[str, list[tuple[int, int]]],
    committed: dict[str, Committed],
) -> None:
    """Write generation `generation` of the POPs the plan builds, on every shard, and commit it
    with each POP's current keys (`current`) and their thresholds."""
    building = plan.building
    if not building:
        return
    thresholds = _thresholds(store, cfg, window, [(q.pop, b, v) for q in building for b, v in q.added])
    for q in building:
        if q.base:
            for (b, v), t in committed[q.pop].thresholds.items():
                thresholds.setdefault((q.pop, b, v), t)
    sql, params = _update_sql(building, thresholds, cfg)
    run = {**base_params(cfg, window, ""), **params, "params": state_params(cfg), "generation": generation}

    def update(shard: Store) -> None:
        shard.execute(sql, run)
        shard.sync_replicas("scoring_state")  # read back through the Distributed table below

    on_every_shard(store, update)
    rows = [(q.pop, q.base, b, v, thresholds[(q.pop, b, v)]) for q in building for b, v in current[q.pop]]
    store.insert_columns(
        "scoring_state_keys",
        {
            "source": [cfg.source] * len(rows),
            "params": [state_params(cfg)] * len(rows),
            "generation": np.full(len(rows), generation, dtype="uint64"),
            "built_on": np.array([r[1] for r in rows], dtype="uint64"),
            "pop": [r[0] for r in rows],
            "bucket": np.array([r[2] for r in rows], dtype="int64").astype("datetime64[s]"),
            "version": np.array([r[3] for r in rows], dtype="uint64"),
            "threshold": np.array([r[4] for r in rows], dtype="float64"),
        },
    )


def score_incrementally(
    store: Store, cfg: ScoringSettings, window: Window, pop: str, keys: list[CacheKey], generation: int
) -> pd.DataFrame:
    """One row per (pop, prefix) seen in the window: score_prefixes' result, from the state.

    `generation` names the state this round builds (the round's time in ns; above every
    generation a shard holds, or it is raised to that)."""
    if window.buckets > MASK_BUCKETS:
        raise ValueError(f"a window of {window.buckets} buckets does not fit the state's masks")
    if not keys:
        return normalize_scores(None)
    started = time.perf_counter()
    committed, newest = _state_on_shards(store, cfg, pop)
    # a generation of its own: never rows added to one that exists (a round run again at the same
    # time, a failed round's uncommitted rows)
    generation = max(generation, newest + 1)
    plan = plan_update([(k.pop, k.bucket_ts, k.version) for k in keys], committed)
    current: dict[str, list[tuple[int, int]]] = {}
    for k in keys:
        current.setdefault(k.pop, []).append((k.bucket_ts, k.version))
    planned = time.perf_counter()
    build(store, cfg, window, plan, generation, current, committed)
    built = time.perf_counter()
    bases = [(p.pop, p.base if p.reuse else generation) for p in plan.pops]
    sql = splice(query("scoring_state_scores"), {"bases": values_list(bases)})
    df = store.query_df(sql, {"source": cfg.source, "params": state_params(cfg)})
    if len(df):
        shift = (epoch_seconds(window.start) // cfg.bucket_seconds) % MASK_BUCKETS
        counted = window_bits(df["counted_mask"].to_numpy(), shift)
        bad = window_bits(df["bad_mask"].to_numpy(), shift)
        changes = transitions(counted, bad, window.buckets)
        df = df.assign(
            counted_mask=counted,
            bad_mask=bad,
            transitions=changes,
            flap_ratio=flap_ratio(changes, df["counted_buckets"].to_numpy()),
        )
    log.debug(
        "scoring state: %d POPs built (%d from nothing, %d keys changed), %d as they were; "
        "plan %.2fs, build %.2fs, read %.2fs",
        len(plan.building),
        len(plan.rebuilt),
        sum(p.changes for p in plan.building),
        len(plan.pops) - len(plan.building),
        planned - started,
        built - planned,
        time.perf_counter() - built,
    )
    return normalize_scores(df)


def window_bits(masks: np.ndarray, shift: int) -> np.ndarray:
    """Masks on bit (bucket number mod 64) turned to bit (bucket - window start): rotate right."""
    values = np.asarray(masks).astype(np.uint64, copy=False)
    if shift % MASK_BUCKETS == 0:
        return values
    s = np.uint64(shift % MASK_BUCKETS)
    return (values >> s) | (values << (np.uint64(MASK_BUCKETS) - s))


def drop_old_state(store: Store, cfg: ScoringSettings, keep_days: int = 2) -> None:
    """Drop the state generations no POP is on any more (every shard), and old days of keys."""
    in_force = {c.generation for c in committed_state(store, cfg, "").values()}
    newest = max(in_force, default=0)

    def drop(shard: Store) -> None:
        for generation in sorted(_generations(shard)):
            if generation < newest and generation not in in_force:
                shard.execute(query("scoring_state_drop_partition"), {"partition": generation})

    on_every_shard(store, drop)
    cutoff = (from_epoch(newest // 1_000_000_000) - dt.timedelta(days=keep_days)).strftime("%Y%m%d")
    for (partition,) in store.query_rows(query("scoring_state_key_partitions"), {"db": store.database}):
        text = str(partition).strip("'")
        if text.isdigit() and text < cutoff:
            store.execute(query("scoring_state_drop_key_partition"), {"partition": int(text)})
