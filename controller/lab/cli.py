"""`dyncc lab`: a namespace lab with shaped clients running the whole dyncc loop.

    dyncc lab --rounds 12                       # 12 accelerated rounds of 20 s, chDB in a temp dir
    dyncc lab --duration 5m --round-seconds 10
    dyncc lab --store clickhouse://default:@127.0.0.1:19000/dyncc_lab --kafka 127.0.0.1:19092
    dyncc lab --record demo/lab-telemetry.bin.gz --rounds 9   # also write the demo's replay file
    dyncc lab --cleanup                         # remove leftover dlab-* namespaces

Each round is one scoring bucket (`--round-seconds`, standing in for 5 minutes); the
lookback and the minimum of counted buckets are given in buckets.  Needs root.
Every option is validated (one line, exit 2) before anything is built.
Topology: controller/lab/topology.py; orchestration: controller/lab/loop.py.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from dyncc_common.errors import ConfigError
from dyncc_common.runtime import StopFlag, setup_logging
from dyncc_common.units import parse_duration

if TYPE_CHECKING:
    from controller.lab.loop import LabOptions

log = logging.getLogger("dyncc.lab")


def configure(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a(
        "--round-seconds",
        type=int,
        default=20,
        help="wall seconds per round = per scoring bucket (a 5-minute round, accelerated; default 20)",
    )
    a("--rounds", type=int, default=0, help="stop after N rounds")
    a("--duration", default="", help="stop after this long (e.g. 3m); default: --rounds, else until Ctrl-C")
    a("--poll-interval", default="500ms", help="collector poll interval (default 500ms)")
    a("--lookback-buckets", type=int, default=12, help="scoring lookback in rounds (default 12)")
    a("--min-buckets", type=int, default=4, help="counted rounds needed before a prefix is scored (default 4)")
    a("--slow", type=int, default=2, help="client prefixes that are always shaped (default 2)")
    a("--alternating", type=int, default=2, help="client prefixes shaped every other round (default 2)")
    a("--fine", type=int, default=4, help="client prefixes never shaped (default 4)")
    a("--rate", default="4mbit", help="tbf rate of a shaped link (default 4mbit)")
    a(
        "--threshold-quantile",
        type=float,
        default=None,
        help="scoring threshold quantile (default: just above the share of shaped prefixes)",
    )
    a("--holdout", type=float, default=0.0, help="holdout fraction (default 0: every selected prefix is treated)")
    a(
        "--store",
        default="",
        metavar="URL",
        help="clickhouse://user:pass@host:port/db or chdb:///dir (default: chDB in --store-dir)",
    )
    a("--store-dir", type=Path, default=None, help="chDB directory (default: a new temp dir)")
    a(
        "--kafka",
        default=None,
        metavar="BROKERS",
        help="route telemetry and configs through this Kafka (collector sink -> ingest; publisher -> agent)",
    )
    a(
        "--record",
        type=Path,
        default=None,
        metavar="PATH",
        help="also record the telemetry (gzip, length-delimited TcpInfoBatch) for `dyncc demo` replays",
    )
    a("--pop", default="lab", help="POP name of the lab edge (default lab)")
    a("--run-id", default="", help="namespace suffix (default: random 4 hex digits)")
    a("--cleanup", action="store_true", help="remove leftover dlab-* namespaces and exit")
    a("-v", "--verbose", action="store_true")


def require_lab_host() -> None:
    """Root and iproute2: the lab's preconditions, as one-line ConfigErrors."""
    if os.geteuid() != 0:
        raise ConfigError("the lab needs root (it creates network namespaces, links and routes)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise ConfigError(f"the lab needs iproute2: '{tool}' not found in PATH")


def cleanup() -> int:
    from controller.lab import topology as lab_topology

    require_lab_host()
    names = lab_topology.lab_namespaces()
    left = lab_topology.destroy(names)
    print(
        f"removed {len(names) - len(left)} lab namespaces" + (f"; could not remove: {' '.join(left)}" if left else "")
    )
    return 1 if left else 0


def options_from_args(args: argparse.Namespace) -> LabOptions:
    from controller.lab.loop import LabOptions
    from controller.lab.run import check_options
    from controller.lab.topology import Shaping

    if args.round_seconds < 2:
        raise ConfigError("--round-seconds must be at least 2")
    for name in ("rounds", "slow", "alternating", "fine"):
        if getattr(args, name) < 0:
            raise ConfigError(f"--{name} must not be negative")
    if args.slow + args.alternating + args.fine == 0:
        raise ConfigError("the lab needs at least one client prefix")
    if args.lookback_buckets < 2:
        raise ConfigError("--lookback-buckets must be at least 2")
    if not 1 <= args.min_buckets <= args.lookback_buckets:
        raise ConfigError("--min-buckets must be between 1 and --lookback-buckets")
    if args.threshold_quantile is not None and not 0 < args.threshold_quantile < 1:
        raise ConfigError("--threshold-quantile must be within (0, 1)")
    if not 0 <= args.holdout < 1:
        raise ConfigError("--holdout must be within [0, 1)")
    duration = parse_duration(args.duration, "--duration") if args.duration else 0.0
    poll = parse_duration(args.poll_interval, "--poll-interval")
    if not 0.1 <= poll <= args.round_seconds / 2:
        raise ConfigError("--poll-interval must be between 100ms and half a round")
    run_id = args.run_id or None
    if run_id is not None and (not run_id.isalnum() or len(run_id) > 8):
        raise ConfigError("--run-id: 1-8 letters or digits")
    extra = {"run_id": run_id} if run_id else {}
    if args.store:
        from controller.store import parse_store_url

        parse_store_url(str(args.store))  # StoreError: one line, exit 2
    elif args.store_dir is not None and Path(args.store_dir).exists() and not Path(args.store_dir).is_dir():
        raise ConfigError(f"bad --store-dir {args.store_dir}: not a directory")
    opts = LabOptions(
        round_seconds=args.round_seconds,
        rounds=args.rounds,
        duration=duration,
        poll_interval=poll,
        lookback_buckets=args.lookback_buckets,
        min_buckets=args.min_buckets,
        slow=args.slow,
        alternating=args.alternating,
        fine=args.fine,
        pop=args.pop,
        kafka=args.kafka,
        record=args.record,
        threshold_quantile=args.threshold_quantile,
        holdout_fraction=args.holdout,
        shaping=Shaping(rate=args.rate),
        **extra,
    )
    check_options(opts)
    return opts


def store_url(args: argparse.Namespace, workdir: Path) -> str:
    if args.store:
        return str(args.store)
    directory = args.store_dir or (workdir / "chdb")
    return f"chdb://{Path(directory).resolve()}?database=dyncc_lab"


def run(args: argparse.Namespace) -> int:
    setup_logging(args.verbose)
    opts = options_from_args(args)  # every option, before anything is built
    if args.cleanup:
        return cleanup()
    require_lab_host()
    workdir = Path(tempfile.mkdtemp(prefix="dyncc-lab-"))
    from controller.lab.run import run_lab

    summary = run_lab(opts, store_url(args, workdir), workdir, StopFlag(), out=sys.stdout)
    print(summary.summary_text())
    print(f"lab files (store, keys, configs): {workdir}")
    if summary.result.stopped_by:
        return 130
    return 1 if summary.result.leftover_namespaces else 0
