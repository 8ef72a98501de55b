"""`dyncc lab`: a fleet-like namespace lab (POPs, edge hosts, path classes) running the whole dyncc loop.

    dyncc lab --rounds 16                       # 16 accelerated rounds of 15 s, chDB in a temp dir
    dyncc lab --duration 5m --round-seconds 20 --prefixes-per-pop 80
    dyncc lab --store clickhouse://default:@127.0.0.1:19000/dyncc_lab --kafka 127.0.0.1:19092
    dyncc lab --record demo/lab-telemetry.bin.gz --rounds 16  # also write the demo's replay files
    dyncc lab --cleanup                         # remove leftover dlab-* namespaces

Each round is one scoring bucket (`--round-seconds`, standing in for 5 minutes); the
lookback and the minimum of counted buckets are given in buckets.  Needs root.
Every option is validated (one line, exit 2) before anything is built: the flags come
from LabSettings (dyncc/lab/settings.py) and dyncc/cli.py calls run(settings).
Topology: dyncc/lab/topology.py; paths: dyncc/lab/paths.py; orchestration:
dyncc/lab/loop.py.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dyncc.lab.settings import LabSettings
from dyncc_common.errors import ConfigError
from dyncc_common.runtime import StopFlag, setup_logging

if TYPE_CHECKING:
    from dyncc.lab.loop import LabOptions

log = logging.getLogger("dyncc.lab")


SETTINGS = LabSettings


def require_lab_host() -> None:
    """Root and iproute2: the lab's preconditions, as one-line ConfigErrors."""
    if os.geteuid() != 0:
        raise ConfigError("the lab needs root (it creates network namespaces, links and routes)")
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("nginx", "nginx-light"), ("clang", "clang")):
        if shutil.which(tool) is None:
            raise ConfigError(f"the lab needs {package}: '{tool}' not found in PATH")


def cleanup() -> int:
    from dyncc.lab import topology as lab_topology

    require_lab_host()
    names = lab_topology.lab_namespaces()
    left = lab_topology.destroy(names)
    print(
        f"removed {len(names) - len(left)} lab namespaces" + (f"; could not remove: {' '.join(left)}" if left else "")
    )
    return 1 if left else 0


def options_from_settings(settings: LabSettings) -> LabOptions:
    """The lab's options from its settings; checks what needs more than the settings (ConfigError)."""
    from dyncc.lab.loop import LabOptions
    from dyncc.lab.model import LabScoring
    from dyncc.lab.run import check_options
    from dyncc.lab.topology import Layout, TopologyError

    extra: dict[str, Any] = {"run_id": settings.run_id} if settings.run_id else {}
    if settings.store:
        from controller.store import parse_store_url

        parse_store_url(settings.store)  # StoreError: one line, exit 2
    elif settings.store_dir is not None and settings.store_dir.exists() and not settings.store_dir.is_dir():
        raise ConfigError(f"bad --store-dir {settings.store_dir}: not a directory")
    layout = Layout(
        pops=settings.pops,
        hosts_per_pop=settings.hosts_per_pop,
        per_pop=settings.prefixes_per_pop,
        lossy=settings.lossy,
        deep=settings.deep,
        alternating=settings.alternating,
        lowrtt=settings.lowrtt,
    )
    try:
        layout.check()
    except TopologyError as exc:
        raise ConfigError(f"bad lab layout: {exc}") from exc
    opts = LabOptions(
        round_seconds=settings.round_seconds,
        rounds=settings.rounds,
        duration=settings.duration or 0.0,
        poll_interval=settings.poll_interval,
        layout=layout,
        scoring=LabScoring(
            lookback_buckets=settings.lookback_buckets,
            min_buckets=settings.min_buckets,
            threshold_quantile=settings.threshold_quantile or 0.0,
            holdout_fraction=settings.holdout,
            min_hold_buckets=settings.min_hold_buckets,
            max_new=settings.max_new,
            trial_blocks=settings.trial_blocks,
        ),
        think_time=settings.think_time,
        kafka=settings.kafka,
        kafka_security=settings.kafka_security,
        enforce=settings.enforce,
        record=settings.record,
        references=settings.references,
        **extra,
    )
    check_options(opts)
    return opts


def store_url(settings: LabSettings, workdir: Path) -> str:
    if settings.store:
        return settings.store
    directory = settings.store_dir or (workdir / "chdb")
    return f"chdb://{Path(directory).resolve()}?database=dyncc_lab"


def run(settings: LabSettings) -> int:
    setup_logging(settings.verbose)
    opts = options_from_settings(settings)  # every option, before anything is built
    if settings.cleanup:
        return cleanup()
    require_lab_host()
    workdir = Path(tempfile.mkdtemp(prefix="dyncc-lab-"))
    from dyncc.lab.closing import print_closing, store_lines
    from dyncc.lab.run import run_lab

    url = store_url(settings, workdir)
    summary = run_lab(opts, url, workdir, StopFlag(), out=sys.stdout)
    lines = ["", summary.summary_text(), *store_lines(url, summary.example, at=summary.example_at)]
    print_closing([*lines, f"lab files (store, keys, configs, logs): {workdir}"])
    result = summary.result
    if result is not None and result.stopped_by:
        return 130
    return 1 if result is None or result.leftover_namespaces else 0
