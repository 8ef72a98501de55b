"""Helpers for the scoring tests on the cluster: one scenario loaded into any store, rounds
through `dyncc control --once`, a round's decisions read back, replicas synced, nodes stopped.

The scenario (scenario_samples) gives each POP prefixes whose decisions change over the
rounds of ROUNDS: steadily bad prefixes that get better after T_BBR (kept: "effect OK"),
worse (reverted after the min hold, then in cooldown, then selected again), or good
(kept by the min hold although no longer bad: the hysteresis), a holdout group by the
controller's own hash that stays as it was, and prefixes that are never candidates
(flapping, low RTT, too few samples, small flows only).  --max-new caps the selections so
that each early round publishes a new config version.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from controller.scoring.decide import holdout_hash
from controller.scoring.settings import ScoringSettings
from controller.store import open_store
from controller.store.migrate import apply_migrations
from controller.store.topology import shard_of
from dyncc.cli import main as dyncc_main
from tests.support import scoring_synth as synth
from tests.support.cluster_util import sync_replicas

if TYPE_CHECKING:
    import pandas as pd

    from controller.store import Store

REPO = Path(__file__).resolve().parents[2]
POPS = ("lax", "ord")
START = dt.datetime(2024, 3, 1, 9, 0, tzinfo=dt.UTC)  # first bucket of the data
T_BBR = dt.datetime(2024, 3, 1, 12, 0, tzinfo=dt.UTC)  # the treated prefixes change from here
BUCKETS_BEFORE = 36
BUCKETS_AFTER = 36
HOLDOUT = 0.3
#: the decision options of every round (the published defaults but for the times and caps; trials
#: off: the scenario compares the round's bookkeeping, tests/controller/evidence has trials)
OPTIONS = (
    "--holdout",
    str(HOLDOUT),
    "--min-hold",
    "1h",
    "--cooldown",
    "1h",
    "--max-new",
    "4",
    "--trial-blocks",
    "0",
    "--holdback",
    "0",
)
#: the rounds: three capped selections, the effect after the min hold (keep / revert), the
#: cooldown, and the reverted prefixes selected again after it
ROUNDS = (
    dt.datetime(2024, 3, 1, 12, 0, 30, tzinfo=dt.UTC),
    dt.datetime(2024, 3, 1, 12, 5, 30, tzinfo=dt.UTC),
    dt.datetime(2024, 3, 1, 12, 10, 30, tzinfo=dt.UTC),
    dt.datetime(2024, 3, 1, 13, 30, 30, tzinfo=dt.UTC),
    dt.datetime(2024, 3, 1, 13, 35, 30, tzinfo=dt.UTC),
    dt.datetime(2024, 3, 1, 14, 40, 30, tzinfo=dt.UTC),
)

IMPROVES = [f"203.0.{i}.0/24" for i in range(6)]  # bad; x2.5 after T_BBR: still bad, effect OK
WORSENS = [f"203.0.{i}.0/24" for i in range(10, 16)]  # bad; x0.4 after T_BBR: negative effect
RECOVERS = [f"203.0.{i}.0/24" for i in range(20, 23)] + ["2001:db8:0:100::/56"]  # bad, then normal
NEVER = {
    "203.0.30.0/24": synth.FLAPPING,
    "203.0.31.0/24": synth.LOW_RTT,
    "203.0.32.0/24": synth.TOO_FEW,
    "203.0.33.0/24": synth.SMALL_FLOWS,
}
NORMAL = [f"198.18.{i}.0/24" for i in range(100)]
#: a round's decisions as compared: floats to 1e-9, the rest (texts, integers, times) exactly
RATES = ("duty_cycle", "flap_ratio", "median_delivery_rate", "low_delivery_rate", "median_min_rtt_ms")
FLOATS = (*RATES, "baseline_low_rate", "effect", "holdout_effect")
INTEGERS = ("family", "samples", "qualifying", "counted_buckets", "bad_buckets", "transitions", "holdout")
TIMES = ("selected_since", "holdout_since", "cooldown_until", "last_seen")
TEXTS = ("pop", "prefix", "decision", "algorithm", "reason")
COLUMNS = [*TEXTS, *INTEGERS, *TIMES, *FLOATS]


def is_holdout(pop: str, prefix: str) -> bool:
    """The controller's own control-group choice (controller/scoring/decide.py)."""
    return holdout_hash(pop, prefix, ScoringSettings().holdout_salt) < HOLDOUT


def scenario_samples(pop: str, seed: int) -> pd.DataFrame:
    """Raw samples of one POP from START for BUCKETS_BEFORE + BUCKETS_AFTER buckets."""
    import pandas as pd

    before: dict[str, synth.Pattern] = {p: synth.NORMAL for p in NORMAL} | NEVER
    before |= {p: synth.STEADY_BAD for p in IMPROVES + WORSENS + RECOVERS}
    after = dict(before)
    for prefix in IMPROVES + WORSENS + RECOVERS:
        if is_holdout(pop, prefix):
            continue  # the control group stays on CUBIC: unchanged
        if prefix in IMPROVES:
            after[prefix] = replace(synth.STEADY_BAD, rate_scale=2.5)
        elif prefix in WORSENS:
            after[prefix] = replace(synth.STEADY_BAD, rate_scale=0.4)
        else:
            after[prefix] = synth.NORMAL
    start = int(START.timestamp())
    first = synth.samples_frame(pop, before, start, BUCKETS_BEFORE, seed=seed)
    second = synth.samples_frame(pop, after, int(T_BBR.timestamp()), BUCKETS_AFTER, seed=seed + 100)
    return pd.concat([first, second], ignore_index=True)


def all_samples() -> pd.DataFrame:
    import pandas as pd

    return pd.concat([scenario_samples(pop, seed=11 + i) for i, pop in enumerate(POPS)], ignore_index=True)


def shards_of(pairs: list[tuple[str, str]], weights: tuple[int, ...] = (1, 1)) -> set[int]:
    """The shard indexes (0-based) the (pop, prefix) pairs live on."""
    return {shard_of(pop, prefix, weights) for pop, prefix in pairs}


def load(url: str, samples: pd.DataFrame) -> None:
    """Schema and the samples into the store at `url` (on a cluster: every replica in sync)."""
    store = open_store(url)
    try:
        apply_migrations(store)
        synth.insert_samples(store, samples)
    finally:
        store.close()
    if "cluster=" in url:
        sync_replicas(url)


def iso(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def control_args(url: str, when: dt.datetime, publish_dir: Path, key: Path) -> list[str]:
    at = ["--once", "--at", iso(when)]
    return ["control", "--clickhouse", url, *at, "--publish-dir", str(publish_dir), "--key", str(key), *OPTIONS]


def control(url: str, when: dt.datetime, publish_dir: Path, key: Path) -> int:
    """One `dyncc control --once` round in this process."""
    return dyncc_main(control_args(url, when, publish_dir, key))


def dyncc_subprocess(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """`dyncc ARGV` as its own process (exit code and stderr as a user sees them)."""
    command = [sys.executable, "-m", "dyncc.cli", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)


def control_subprocess(url: str, when: dt.datetime, publish_dir: Path, key: Path) -> subprocess.CompletedProcess[str]:
    """One `dyncc control --once` round as its own process."""
    return dyncc_subprocess(control_args(url, when, publish_dir, key))


def round_decisions(store: Store, when: dt.datetime) -> pd.DataFrame:
    """The selections rows of the round at `when` (COLUMNS, times as epoch seconds), sorted by pop, prefix."""
    import pandas as pd

    times = [f"toUInt32({c}) AS t_{c}" for c in TIMES]
    df = store.query_df(
        f"SELECT {', '.join([*TEXTS, *INTEGERS, *FLOATS, *times])} FROM selections WHERE round_time_ns = %(ns)s",
        {"ns": int(when.timestamp()) * 1_000_000_000},
    )
    out = pd.DataFrame({c: [_text(v) for v in df[c]] for c in TEXTS}, dtype=object)
    for column in INTEGERS:
        out[column] = df[column].to_numpy(dtype="int64")
    for column in TIMES:
        out[column] = df[f"t_{column}"].to_numpy(dtype="int64")
    for column in FLOATS:
        out[column] = df[column].to_numpy(dtype="float64")
    return out[COLUMNS].sort_values(["pop", "prefix"], kind="stable").reset_index(drop=True)


def assert_same_decisions(got: pd.DataFrame, expected: pd.DataFrame, what: str) -> None:
    """Equal decision tables: exact for decisions, texts, integers and times; floats to 1e-9."""
    import pandas as pd

    assert len(expected) > 0, f"{what}: no decisions"
    exact = [c for c in COLUMNS if c not in FLOATS]
    pd.testing.assert_frame_equal(got[exact], expected[exact], check_exact=True, obj=f"{what} (exact columns)")
    pd.testing.assert_frame_equal(
        got[list(FLOATS)], expected[list(FLOATS)], check_exact=False, rtol=1e-9, obj=f"{what} (float columns)"
    )


def config_rows(store: Store) -> list[tuple[str, int, str, int]]:
    """(pop, version, status, entries) of every config_versions row, in order."""
    rows = store.query_rows(
        "SELECT pop, version, status, entries FROM config_versions ORDER BY pop, version, created_ns"
    )
    return [(_text(p), int(v), _text(s), int(e)) for p, v, s, e in rows]


def published_prefixes(directory: Path) -> dict[str, list[tuple[str, str]]]:
    """pop -> [(prefix, algorithm)] of the configs written to a --publish-dir."""
    from schemas.congestion_pb2 import CongestionConfig

    out = {}
    for path in sorted(directory.glob("*.cfg")):
        config = CongestionConfig.FromString(path.read_bytes())
        out[config.pop] = sorted((e.prefix, e.algorithm) for e in config.entries)
    return out


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
