"""Benchmark the scoring SQL: N prefixes x 36 five-minute buckets, ClickHouse 18.16 and chDB.

    python bench/scoring.py [--sizes 10000,100000,200000] [--clickhouse URL] [--chdb DIR]
                            [--samples 6] [--repeat 3] [--keep]

Fills tcpinfo_5m directly with INSERT ... SELECT ...State(...) FROM numbers(), one
bucket per INSERT, then times
  cold:  the first round, which merges all 36 buckets' quantile states from the
         rollup into the scoring_buckets cache, then scores;
  round: the next round (5 minutes later): one new bucket merged into the cache,
         then the scoring query over 36 buckets (what every round costs);
  full controller round: run_round (refresh, score, previous state, decisions,
         writing every prefix to selections) once more.
Bar: 200k prefixes <= 5 s on the server, <= 3 s on chDB, per round.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from controller.scoring.query import refresh, score_prefixes, window_for
from controller.scoring.round import run_round
from controller.scoring.settings import ScoringConfig
from controller.store import Store, open_store
from controller.store.migrate import apply_migrations

POP = "bench1"

FILL_SQL = """
INSERT INTO tcpinfo_5m
SELECT
    %(bucket)s AS bucket,
    %(pop)s AS pop,
    concat(IPv4NumToString(toUInt32(167772160 + p * 256)), '/24') AS prefix,
    toUInt8(4) AS family,
    countState() AS samples,
    countIfState(ba > 102400) AS qualifying,
    quantilesState(0.05, 0.1, 0.5)(dr) AS delivery_rate_q,
    quantilesIfState(0.05, 0.1, 0.5)(dr, ba > 102400) AS delivery_rate_qual_q,
    quantilesIfState(0.1, 0.5)(mr, ba > 102400) AS min_rtt_qual_q,
    quantilesState(0.5, 0.9)(toFloat64(0)) AS retrans_ratio_q,
    sumState(ba) AS bytes_acked_sum,
    sumState(ba) AS bytes_sent_sum,
    sumState(toUInt64(0)) AS bytes_retrans_sum
FROM
(
    SELECT
        intDiv(number, %(k)s) AS p,
        -- per-prefix base rate (1-20 MB/s) times per-sample noise (0.5x-1.5x)
        toUInt64((1000000 + (sipHash64(p) % 19000000))
                 * (0.5 + (sipHash64(number, %(salt)s) % 1000) / 1000.)) AS dr,
        toUInt32(5000 + sipHash64(p, 1) % 95000) AS mr,
        toUInt64(50000 + sipHash64(number, %(salt)s, 2) % 1000000) AS ba
    FROM numbers(%(rows)s)
)
GROUP BY p
"""


def fill(store: Store, prefixes: int, buckets: int, end: dt.datetime, samples: int) -> float:
    started = time.perf_counter()
    for i in range(buckets):
        bucket = end - dt.timedelta(minutes=5 * (buckets - i))
        store.execute(
            FILL_SQL,
            {"bucket": bucket, "pop": POP, "k": samples, "rows": prefixes * samples, "salt": i},
        )
    return time.perf_counter() - started


def bench_one(url: str, label: str, sizes: list[int], samples: int, repeat: int, keep: bool) -> None:
    cfg = ScoringConfig()
    now = dt.datetime(2024, 3, 1, 12, 0, 10, tzinfo=dt.UTC)
    window = window_for(now, cfg)
    later = now + dt.timedelta(minutes=5)
    window2 = window_for(later, cfg)
    for size in sizes:
        store = open_store(url.replace("{db}", f"bench_{uuid.uuid4().hex[:8]}"))
        try:
            apply_migrations(store)
            # 36 buckets of the first window plus the one bucket the next round adds
            fill_s = fill(store, size, window.buckets + 1, window2.end, samples)
            t0 = time.perf_counter()
            keys = refresh(store, cfg, window, POP, 1)
            t1 = time.perf_counter()
            df = score_prefixes(store, cfg, window, POP, keys)
            t2 = time.perf_counter()
            cold_refresh, cold_score = t1 - t0, t2 - t1
            # the next round: one new bucket to merge from the rollup, 35 from the cache
            t0 = time.perf_counter()
            keys = refresh(store, cfg, window2, POP, 2)
            t1 = time.perf_counter()
            df = score_prefixes(store, cfg, window2, POP, keys)
            t2 = time.perf_counter()
            round_refresh, round_score = t1 - t0, t2 - t1
            scores = [round_score]
            for _ in range(repeat - 1):
                t0 = time.perf_counter()
                df = score_prefixes(store, cfg, window2, POP, keys)
                scores.append(time.perf_counter() - t0)
            # a whole controller round (nothing new to merge): + previous state, decisions, selections
            full = run_round(store, cfg, later, POP)
            steps = " ".join(f"{k} {v:.2f}s" for k, v in full.timings.items())
            bar = 5.0 if label == "clickhouse" else 3.0
            total = round_refresh + round_score
            verdict = "" if size < 200_000 else f"  bar {bar:.0f}s: {'OK' if total <= bar else 'OVER'}"
            print(
                f"{label:10s} prefixes={size:>7d} x {window.buckets} buckets scored={len(df):>7d}  "
                f"round={total:.2f}s (refresh 1 new bucket {round_refresh:.2f}s + score {round_score:.2f}s, "
                f"best score {min(scores):.2f}s)  cold={cold_refresh + cold_score:.2f}s "
                f"(refresh 36 buckets {cold_refresh:.2f}s + score {cold_score:.2f}s)  fill {fill_s:.0f}s  "
                f"full controller round {full.seconds:.2f}s [{steps}]" + verdict,
                flush=True,
            )
        finally:
            if not keep:
                store.execute(f"DROP DATABASE IF EXISTS {store.database}")
            store.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,200000")
    ap.add_argument(
        "--clickhouse",
        default="clickhouse://default:@127.0.0.1:19000/{db}?ttl=off",
        help="server URL ({db} = a fresh database); '' to skip",
    )
    ap.add_argument("--chdb", default=None, help="chDB directory (default: a temporary one); 'off' to skip")
    ap.add_argument("--samples", type=int, default=6, help="samples per prefix and bucket")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the benchmark databases")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.clickhouse:
        bench_one(args.clickhouse, "clickhouse", sizes, args.samples, args.repeat, args.keep)
    if args.chdb != "off":
        directory = args.chdb or tempfile.mkdtemp(prefix="dyncc-bench-chdb-")
        url = f"chdb://{directory}?database={{db}}&ttl=off"
        bench_one(url, "chdb", sizes, args.samples, args.repeat, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
