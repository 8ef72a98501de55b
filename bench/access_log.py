"""Access-log load rate: `AccessLogLoader.load` of a synthetic nginx log into a fresh database.

    python bench/access_log.py [--lines 300000] [--runs 3] [--stores chdb,clickhouse,cluster]
                               [--clickhouse clickhouse://default:@127.0.0.1:19000/default]
                               [--cluster clickhouse://default:@127.0.0.1:19101/default?cluster=dyncc]

1. Writes LINES lines of the dyncc log_format (~100 bytes each): 1,000 clients (900 IPv6 /56s,
   49 IPv4 and 49 IPv4-mapped under the documentation prefixes), four object sizes, times
   increasing by 0-20 ms.
2. Per store and run: a fresh database with the schema, one loader, one load() of the whole
   file (default chunks), timed; then a second load() with nothing new, timed.  The store's
   database is dropped afterwards (chDB: a temporary directory, removed at the end).
3. Prints lines/s per run and the median and range per store, and the parse rate alone
   (parse_line over the same lines, in this process).  A store whose URL is empty is skipped.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from controller.ingest.access_loader import AccessLogLoader
from controller.ingest.access_log import parse_line
from controller.store import open_store
from controller.store.migrate import apply_migrations


def write_log(path: Path, lines: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    addrs = [f"2001:db8:{rng.randrange(1, 4096):x}:{rng.randrange(0, 256):x}00::2" for _ in range(900)]
    addrs += [f"198.51.100.{i}" for i in range(1, 50)] + [f"::ffff:203.0.113.{i}" for i in range(1, 50)]
    sizes = [(b"10k", 10240), (b"100k", 102400), (b"1m", 1048576), (b"4m", 4194304)]
    t = 1_763_948_000_000
    with open(path, "wb") as fh:
        for i in range(lines):
            t += rng.randrange(0, 20)
            name, size = rng.choice(sizes)
            rt_s, rt_ms = divmod(rng.randrange(1, 5000), 1000)
            fh.write(
                b'%d.%03d %s 200 %d %d %d.%03d %d %d "GET /obj/%s-%d.bin HTTP/1.1"\n'
                % (t // 1000, t % 1000, rng.choice(addrs).encode(), size + 300, size, rt_s, rt_ms,
                   100_000 + i // 3, i % 3 + 1, name, rng.randrange(20))
            )  # fmt: skip


def one_run(url: str, path: Path, lines: int) -> tuple[float, float]:
    """(lines/s of the load, seconds of a call with nothing new) into a fresh database at `url`."""
    store = open_store(url)
    try:
        apply_migrations(store)
        loader = AccessLogLoader(store, pop="p0", host="h0")
        t0 = time.perf_counter()
        result = loader.load(path)
        seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
        loader.load(path)
        idle = time.perf_counter() - t1
        loader.close()
        if result.rows != lines:
            raise SystemExit(f"loaded {result.rows} rows of {lines}: {result.summary()}")
        return lines / seconds, idle
    finally:
        if url.startswith("clickhouse"):
            store.drop_database()  # type: ignore[attr-defined]
        store.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=300_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--stores", default="chdb,clickhouse,cluster")
    ap.add_argument(
        "--clickhouse", default=os.environ.get("DYNCC_TEST_CLICKHOUSE", "clickhouse://default:@127.0.0.1:19000/default")
    )
    ap.add_argument("--cluster", default=os.environ.get("DYNCC_TEST_CLUSTER", ""))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dyncc-bench-access-"))
    try:
        path = work / "access.log"
        write_log(path, args.lines)
        raw = path.read_bytes().split(b"\n")[:-1]
        t0 = time.perf_counter()
        for line in raw:
            parse_line(line)
        print(f"parse alone: {len(raw) / (time.perf_counter() - t0):,.0f} lines/s")
        bases = {"chdb": f"chdb://{work}/chdb", "clickhouse": args.clickhouse, "cluster": args.cluster}
        for name in args.stores.split(","):
            base = bases[name]
            if not base:
                print(f"{name}: no URL, skipped")
                continue
            rates, idles = [], []
            for _ in range(args.runs):
                database = f"bench_access_{uuid.uuid4().hex[:8]}"
                if name == "chdb":
                    url = f"{base}?database={database}&ttl=off"
                else:
                    head, _, query = base.partition("?")
                    url = head.rsplit("/", 1)[0] + f"/{database}" + (f"?{query}" if query else "")
                rate, idle = one_run(url, path, args.lines)
                rates.append(rate)
                idles.append(idle)
                print(f"{name}: {rate:,.0f} lines/s, a call with nothing new {idle * 1e6:.0f} us, "
                      f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
            print(
                f"{name}: median {statistics.median(rates):,.0f} lines/s [{min(rates):,.0f}-{max(rates):,.0f}] "
                f"over {args.runs} runs of {args.lines} lines"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
