"""The trial rule in the closed loop (tests/support/closed_loop.py): the decision table at the
defaults over many seeds and rounds, and how much variance each part of the estimator removes.

The variance table prints, per estimator variant, the median over trials of the per-pair
standard deviation of the effect (se x sqrt(pairs), from each trial's latest effect) as a ratio
to the reference measured in the same run: the p10 of each bucket with no controls (the
estimator before issue 34).  Usage: .venv/bin/python -m bench.closed_loop [--seeds N] [--rounds R]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from controller.evidence.settings import EvidenceSettings
from tests.support import closed_loop as cl

VARIANTS = {
    "p10, no controls (reference)": {"statistic": "p10", "controls": False},
    "geomean, no controls": {"statistic": "geomean", "controls": False},
    "geomean, controls (theta 1)": {"statistic": "geomean", "controls": True, "cuped": False},
    "geomean, controls + CUPED (default)": {},
}


def pair_sd(records: list[cl.PrefixRecord]) -> float:
    values = [
        r.final.se * math.sqrt(min(r.final.n_a, r.final.n_b))
        for r in records
        if r.final is not None and r.final.has_interval and r.final.se > 0
    ]
    return float(np.median(values)) if values else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=48)
    args = ap.parse_args()
    seeds = tuple(range(1, args.seeds + 1))
    cond = cl.Conditions(rounds=args.rounds)
    t = time.perf_counter()
    records = cl.run(cond, seeds)
    print(f"defaults, {args.seeds} seeds x {args.rounds} rounds ({time.perf_counter() - t:.1f} s):")
    print(cl.format_table(cl.table(records, cond.effects)))
    for loading in ((1.0, 1.0), (0.0, 2.0)):
        short = cl.Conditions(rounds=min(args.rounds, 48), loading=loading)
        print(f"\nPOP shock carried x U{loading} per prefix, {min(len(seeds), 4)} seeds x {short.rounds} rounds:")
        ref = math.nan
        print("| estimator | per-pair sd (median) | ratio to the reference | variance ratio | +20 % kept | 0 kept |")
        print("|---|---|---|---|---|---|")
        for name, changes in VARIANTS.items():
            recs = cl.run(short, seeds[:4], evidence=EvidenceSettings(**changes))  # type: ignore[arg-type]
            sd = pair_sd(recs)
            ref = sd if math.isnan(ref) else ref
            rows = {r.effect: r for r in cl.table(recs, short.effects)}
            print(f"| {name} | {sd:.3f} | {sd / ref:.2f} | {(sd / ref) ** 2:.2f} | {rows[0.2].kept:.0%} | "
                  f"{rows[0.0].kept:.0%} |")  # fmt: skip


if __name__ == "__main__":
    main()
