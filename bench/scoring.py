"""Benchmark full controller rounds: N prefixes x 36 five-minute buckets, chDB and ClickHouse.

    python bench/scoring.py [--sizes 200000,1000000] [--runs 3] [--cold-runs 1] [--samples 6]
                            [--clickhouse URL] [--chdb DIR|off] [--fill copy|compute] [--keep]
                            [--lock FILE]

Per target and size, in a fresh database (the URL's {db}):
  fill   tcpinfo_5m and tcpinfo_5m_nal (the default scoring's source) get N prefixes x (36 + 3 x runs + 1)
         buckets: the first by INSERT ... SELECT
         ...State(...) FROM numbers(), the others copies of it (--fill copy, the default) or
         each computed the same way with another seed (--fill compute: slower; the scoring
         does the same work either way: as many states to merge, rows to rank);
  cold   the first run_round on an empty scoring cache: all 36 buckets merged from the rollup,
         then score, decide, write every prefix to selections;
  warm   `runs` more run_rounds 5 minutes apart: one new bucket merged, the incremental state
         moved by one bucket (controller/scoring/incremental.py), scored, decided against the
         previous round's state, written (what every controller round costs);
  full   the reference, in the same run: `runs` rounds more with incremental=False (each re-reads
         the 36 buckets of the cache), printed as the incremental round's ratio to it;
         --cold-runs N: N - 1 more cold rounds after those, the cache tables truncated first;
  kept   the cache kept by a loader (`dyncc ingest --cache-every`, controller/statistics/keeper.py):
         and a long-running controller: `runs` times a keeper tick (the one new bucket merged, as
         data arrives) and the round after it (which finds the bucket computed, and its previous
         state in the memo of the round before it: controller/scoring/state.py StateMemo; its
         `previous` step printed as a ratio to the warm rounds', which read it from selections);
         then a new controller (the scoring state emptied, no memo) on the kept cache: what a
         controller started on a store with data costs;
  rebuilt one round with another --min-bucket-samples: a new scoring state built from the cache
         as it is (what a settings change costs; a restarted controller keeps its state in the
         store and its first round is a warm one);
Printed per round: the wall time and run_round's phases (refresh, score, previous, decide, write);
per target and size: median [range] of the warm rounds, the cold/warm ratio, the peak RSS of
this process over the rounds (chDB runs inside it), the load average.  Reference measured in
the same run: the decision step of the code this one replaced (tests/support/decide_reference.py)
on the same scores and state; and the floor: a plain read of one row per prefix of the scoring
state (STATE_READ_SQL into pandas), each round printed as a multiple of it.  --lock FILE holds
flock(2) on FILE (the benchmark lock that flock(1) takes) over the timed part only, not the
fill.  Figures and targets: docs/performance.md ("Scoring round").
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import fcntl
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


from controller.scoring.decide import decide
from controller.scoring.query import refresh, score_prefixes, window_for
from controller.scoring.round import RoundResult, run_round
from controller.scoring.settings import ScoringSettings
from controller.scoring.state import StateMemo, load_previous
from controller.statistics.keeper import CacheKeeper
from controller.store import Store, open_store
from controller.store.migrate import apply_migrations
from tests.support.decide_reference import reference_decide

POP = "bench1"
PHASES = ("refresh", "score", "previous", "decide", "write")

# the samples of one bucket: per-prefix base rate (1-20 MB/s) times per-sample noise (0.5x-1.5x)
SAMPLES_SQL = """
SELECT
    intDiv(number, %(k)s) AS p,
    concat(IPv4NumToString(toUInt32(167772160 + p * 256)), '/24') AS prefix,
    toUInt64((1000000 + (sipHash64(p) % 19000000))
             * (0.5 + (sipHash64(number, %(salt)s) % 1000) / 1000.)) AS dr,
    toUInt32(5000 + sipHash64(p, 1) % 95000) AS mr,
    toUInt64(50000 + sipHash64(number, %(salt)s, 2) % 1000000) AS ba
FROM numbers(%(rows)s)
"""

FILL_SQL = f"""
INSERT INTO tcpinfo_5m
SELECT
    %(bucket)s AS bucket, %(pop)s AS pop, any(prefix), toUInt8(4) AS family,
    countState() AS samples,
    countIfState(ba > 102400) AS qualifying,
    quantilesState(0.05, 0.1, 0.5)(dr) AS delivery_rate_q,
    quantilesIfState(0.05, 0.1, 0.5)(dr, ba > 102400) AS delivery_rate_qual_q,
    quantilesIfState(0.1, 0.5)(mr, ba > 102400) AS min_rtt_qual_q,
    quantilesState(0.5, 0.9)(toFloat64(0)) AS retrans_ratio_q,
    sumState(ba) AS bytes_acked_sum,
    sumState(ba) AS bytes_sent_sum,
    sumState(toUInt64(0)) AS bytes_retrans_sum
FROM ({SAMPLES_SQL})
GROUP BY p
"""

# the default scoring's source (app-limited samples left out, migration 009): the same samples,
# none of them app-limited
FILL_NAL_SQL = f"""
INSERT INTO tcpinfo_5m_nal
SELECT
    %(bucket)s AS bucket, %(pop)s AS pop, any(prefix), toUInt8(4) AS family,
    countState() AS samples,
    countIfState(ba > 102400) AS qualifying_nal,
    countIfState(toUInt8(0)) AS qualifying_al,
    quantilesIfState(0.05, 0.1, 0.5)(dr, ba > 102400) AS delivery_rate_nal_q,
    quantilesIfState(0.1, 0.5)(mr, ba > 102400) AS min_rtt_nal_q
FROM ({SAMPLES_SQL})
GROUP BY p
"""

COPY_NAL_SQL = """
INSERT INTO tcpinfo_5m_nal
SELECT %(to)s AS copied_bucket, pop, prefix, family, samples, qualifying_nal, qualifying_al, delivery_rate_nal_q,
    min_rtt_nal_q
FROM tcpinfo_5m_nal
WHERE bucket = %(source)s
"""

COPY_SQL = """
INSERT INTO tcpinfo_5m
SELECT %(to)s AS copied_bucket, pop, prefix, family, samples, qualifying, delivery_rate_q, delivery_rate_qual_q,
    min_rtt_qual_q, retrans_ratio_q, bytes_acked_sum, bytes_sent_sum, bytes_retrans_sum
FROM tcpinfo_5m
WHERE bucket = %(source)s
"""


def fill(
    store: Store, prefixes: int, buckets: int, end: dt.datetime, samples: int, copy: bool, both: bool = True
) -> float:
    """`buckets` five-minute buckets ending at `end`: each computed (FILL_SQL), or the first computed
    and copied to the others (on a cluster shard by shard in parallel, each reading its own rows).
    both=False fills tcpinfo_5m_nal only (the default scoring's source)."""
    started = time.perf_counter()
    times = [end - dt.timedelta(minutes=5 * (buckets - i)) for i in range(buckets)]
    fills, copies = ((FILL_SQL, FILL_NAL_SQL), (COPY_SQL, COPY_NAL_SQL)) if both else ((FILL_NAL_SQL,), (COPY_NAL_SQL,))
    for i, bucket in enumerate(times if not copy else times[:1]):
        for sql in fills:
            store.execute(sql, {"bucket": bucket, "pop": POP, "k": samples, "rows": prefixes * samples, "salt": i})
    if copy:

        def copy_on(shard: Store) -> None:
            for bucket in times[1:]:
                for sql in copies:
                    shard.execute(sql, {"to": bucket, "source": times[0]})

        with ThreadPoolExecutor(max_workers=len(store.shard_stores())) as pool:
            list(pool.map(copy_on, store.shard_stores()))
    return time.perf_counter() - started


def reset_peak_rss() -> None:
    """Start a new peak-RSS (VmHWM) measurement for this process (Linux: clear_refs 5)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# the floor a round is measured against: one row per prefix of the scoring state the rounds keep
# (sql/migrations/013_scoring_state.sql), the newest generation, read into pandas and nothing else
STATE_READ_SQL = """
SELECT pop, prefix, seen, samples, qualifying, counted, bad, counted_mask, bad_mask, low_rtt, sum_stat, sum_low, sum_rtt
FROM scoring_state
WHERE generation = (SELECT max(generation) FROM scoring_state)
"""


def state_reads(store: Store, runs: int = 3) -> tuple[list[float], int]:
    """`runs` plain reads of the state (STATE_READ_SQL) into a DataFrame: (seconds each, rows)."""
    seconds, rows = [], 0
    for _ in range(max(runs, 1)):
        t0 = time.perf_counter()
        rows = len(store.query_df(STATE_READ_SQL))
        seconds.append(time.perf_counter() - t0)
    return seconds, rows


def median_range(values: list[float], fmt: str = "{:.2f}") -> str:
    text = fmt.format(statistics.median(values))
    return text + (f" [{fmt.format(min(values))}-{fmt.format(max(values))}]" if len(values) > 1 else "")


def phases(result: RoundResult) -> str:
    return " ".join(f"{k} {result.timings.get(k, 0.0):.2f}s" for k in PHASES)


def rounds(
    store: Store, cfg: ScoringSettings, now: dt.datetime, label: str, size: int, runs: int, cold_runs: int
) -> tuple[list[float], list[RoundResult], float, float, tuple[float, float]]:
    """The timed part: cold round(s), warm rounds, a state rebuild; (cold seconds, warm results,
    rebuild seconds, peak RSS MiB, load)."""
    reset_peak_rss()
    load_before = os.getloadavg()[0]
    cold = run_round(store, cfg, now, POP)
    print(f"{label} {size}: cold {cold.seconds:.2f}s [{phases(cold)}]", flush=True)
    warm: list[RoundResult] = []
    for i in range(1, runs + 1):
        result = run_round(store, cfg, now + dt.timedelta(minutes=5 * i), POP)
        warm.append(result)
        print(f"{label} {size}: warm {i} {result.seconds:.2f}s [{phases(result)}]", flush=True)
    colds = [cold.seconds]
    for j in range(1, cold_runs):  # again from an empty cache, at the last warm round's time
        for table in ("scoring_cache", "scoring_versions", "scoring_state", "scoring_state_keys"):
            store.execute(f"TRUNCATE TABLE {table}")
        again = run_round(store, cfg, now + dt.timedelta(minutes=5 * runs), POP)
        colds.append(again.seconds)
        print(f"{label} {size}: cold {j + 1} {again.seconds:.2f}s [{phases(again)}]", flush=True)
    # other scoring settings: a new state built from the cache as it is (no bucket merged again)
    rebuild = run_round(
        store, dataclasses.replace(cfg, min_samples=cfg.min_samples + 1), now + dt.timedelta(minutes=5 * runs), POP
    )
    print(f"{label} {size}: state rebuilt {rebuild.seconds:.2f}s [{phases(rebuild)}]", flush=True)
    rss = peak_rss_mib()
    load_after = os.getloadavg()[0]
    return colds, warm, rebuild.seconds, rss, (load_before, load_after)


STATE_TABLES = ("scoring_state", "scoring_state_keys")


def kept_rounds(
    store: Store, cfg: ScoringSettings, now: dt.datetime, label: str, size: int, runs: int
) -> tuple[list[float], list[RoundResult], float]:
    """The cache kept by a loader (`dyncc ingest --cache-every`) and a long-running controller:
    per new bucket, the keeper's tick, then the controller's round, which finds the bucket
    computed and its previous state in its memo (the round before it, kept by the process);
    then a new controller (no scoring state, no memo) on the kept cache.
    (tick seconds, round results, new-controller seconds)."""
    keeper = CacheKeeper(store, cfg.cache_source, cfg.lookback_seconds)
    memo = StateMemo()
    ticks, after = [], []
    for i in range(0, runs + 1):  # round 0 fills the memo; it is not timed
        when = now + dt.timedelta(minutes=5 * i)
        tick = keeper.tick(when)
        result = run_round(store, cfg, when, POP, memo=memo)
        if i == 0:
            continue
        ticks.append(tick.seconds)
        after.append(result)
        print(
            f"{label} {size}: keeper tick {tick.seconds:.2f}s ({tick.computed} computed), "
            f"round after it {result.seconds:.2f}s [{phases(result)}]",
            flush=True,
        )
    for table in STATE_TABLES:
        store.execute(f"TRUNCATE TABLE {table}")
    when = now + dt.timedelta(minutes=5 * (runs + 1))
    keeper.tick(when)
    fresh = run_round(store, cfg, when, POP)
    print(f"{label} {size}: new controller on the kept cache {fresh.seconds:.2f}s [{phases(fresh)}]", flush=True)
    return ticks, after, fresh.seconds


def full_rounds(store: Store, cfg: ScoringSettings, now: dt.datetime, label: str, size: int, runs: int) -> list[float]:
    """The reference: warm rounds that re-read the whole window (incremental=False), after the
    incremental ones, on the same data (each one bucket later, like them)."""
    full_cfg = dataclasses.replace(cfg, incremental=False)
    out = []
    for i in range(1, runs + 1):
        result = run_round(store, full_cfg, now + dt.timedelta(minutes=5 * i), POP)
        out.append(result.seconds)
        print(f"{label} {size}: full {i} {result.seconds:.2f}s [{phases(result)}]", flush=True)
    return out


@contextlib.contextmanager
def timed_section(lock: str) -> Iterator[None]:
    """Hold flock(2) on `lock` (the same lock as flock(1)) for the timed rounds; '' = no lock."""
    if not lock:
        yield
        return
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def bench_one(
    url: str, label: str, size: int, samples: int, runs: int, cold_runs: int, copy: bool, keep: bool, lock: str
) -> None:
    cfg = ScoringSettings()
    now = dt.datetime(2024, 3, 1, 12, 0, 10, tzinfo=dt.UTC)
    store = open_store(url.replace("{db}", f"bench_{uuid.uuid4().hex[:8]}"))
    try:
        apply_migrations(store)
        # warm rounds, the full ones, the kept-cache ones and a new controller's
        extra = 3 * runs + 1
        end = window_for(now + dt.timedelta(minutes=5 * extra), cfg).end
        fill_s = fill(store, size, cfg.lookback_buckets + extra, end, samples, copy)
        print(f"{label} {size}: filled {cfg.lookback_buckets + extra} buckets in {fill_s:.0f}s", flush=True)
        with timed_section(lock):
            colds, warm, rebuilt, rss, loads = rounds(store, cfg, now, label, size, runs, cold_runs)
            full = full_rounds(store, cfg, now + dt.timedelta(minutes=5 * runs), label, size, runs)
            ticks, after, fresh = kept_rounds(store, cfg, now + dt.timedelta(minutes=5 * 2 * runs), label, size, runs)
            kept_s = [r.seconds for r in after]
            # the reference: the replaced decision code on the next round's scores and state
            later = now + dt.timedelta(minutes=5 * (3 * runs + 1))
            window = window_for(later, cfg)
            keys = refresh(store, cfg, window, POP, 10**18)
            scores = score_prefixes(store, cfg, window, POP, keys)
            previous = load_previous(store, POP, later)
            t0 = time.perf_counter()
            decide(scores, previous, int(later.timestamp()), cfg)
            t1 = time.perf_counter()
            reference_decide(scores, previous, int(later.timestamp()), cfg)
            t2 = time.perf_counter()
            reads, read_rows = state_reads(store, runs)
        seconds = [r.seconds for r in warm]
        floor = statistics.median(reads)
        per_phase = ", ".join(f"{k} {median_range([r.timings.get(k, 0.0) for r in warm])}" for k in PHASES)
        kept_phase = ", ".join(f"{k} {median_range([r.timings.get(k, 0.0) for r in after])}" for k in PHASES)
        kept_prev = statistics.median(r.timings["previous"] for r in after) / statistics.median(
            r.timings["previous"] for r in warm
        )
        print(
            f"{label:10s} prefixes={size:>7d} x {cfg.lookback_buckets} buckets scored={len(warm[-1].decisions)}  "
            f"warm round {median_range(seconds)}s ({per_phase})  cold {median_range(colds)}s "
            f"= x{statistics.median(colds) / statistics.median(seconds):.1f} warm  "
            f"state rebuilt from the cache {rebuilt:.2f}s = x{rebuilt / statistics.median(seconds):.1f} warm  "
            f"full recompute {median_range(full)}s "
            f"(incremental x{statistics.median(seconds) / statistics.median(full):.2f})  "
            f"cache kept by the loader: keeper tick {median_range(ticks)}s per bucket, round after it "
            f"(the previous state kept in memory) {median_range(kept_s)}s ({kept_phase}; previous x{kept_prev:.2f} "
            f"of the warm rounds'), new controller {fresh:.2f}s = x{fresh / statistics.median(seconds):.1f} warm  "
            f"plain state read {median_range(reads)}s ({read_rows} rows): "
            f"warm round x{statistics.median(seconds) / floor:.1f}, "
            f"round after a kept cache x{statistics.median(kept_s) / floor:.1f} of it  "
            f"peak RSS {rss:.0f} MiB  "
            f"decide x{(t1 - t0) / (t2 - t1):.2f} of the replaced code ({t1 - t0:.2f}s vs {t2 - t1:.2f}s)  "
            f"load {loads[0]:.1f}-{loads[1]:.1f}",
            flush=True,
        )
    finally:
        if not keep:
            store.execute(f"DROP DATABASE IF EXISTS {store.database}")
        store.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="200000", help="prefixes per run, comma-separated")
    ap.add_argument("--runs", type=int, default=3, help="warm rounds after the cold one")
    ap.add_argument("--cold-runs", type=int, default=1, help="cold rounds (the cache emptied before each)")
    ap.add_argument(
        "--clickhouse",
        default="clickhouse://default:@127.0.0.1:19000/{db}?ttl=off",
        help="server URL ({db} = a fresh database); '' to skip",
    )
    ap.add_argument("--chdb", default=None, help="chDB directory (default: a temporary one); 'off' to skip")
    ap.add_argument("--samples", type=int, default=6, help="samples per prefix and bucket")
    ap.add_argument("--fill", choices=("copy", "compute"), default="copy", help="see above [default: copy]")
    ap.add_argument("--keep", action="store_true", help="keep the benchmark databases")
    ap.add_argument(
        "--lock", default="", help="hold flock on this file over the timed rounds only (not the fill) [default: none]"
    )
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    copy = args.fill == "copy"
    for size in sizes:
        if args.clickhouse:
            bench_one(
                args.clickhouse, "clickhouse", size, args.samples, args.runs, args.cold_runs, copy, args.keep, args.lock
            )
        if args.chdb != "off":
            directory = args.chdb or tempfile.mkdtemp(prefix="dyncc-bench-chdb-")
            url = f"chdb://{directory}?database={{db}}&ttl=off"
            bench_one(url, "chdb", size, args.samples, args.runs, args.cold_runs, copy, args.keep, args.lock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
