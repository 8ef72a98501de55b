"""Every subcommand's bad inputs: exit 2, exactly one line on stderr, no traceback, within seconds.

One row per bad invocation of `dyncc` (collect, agent, ingest, control and its actions, report,
demo, lab, schema): argv, and a fragment the one line must contain (the option or value at
fault, so a row cannot pass for the wrong reason, e.g. "store unreachable" when the option was
never checked; None for outages whose wording is not the point).  Each row runs `dyncc` in a
subprocess with a timeout.  A few rows are not bad input: `--version` (its one line on stdout,
exit 0) and a `control --once` round that ran and could not publish (exit 1, as its --help
says; it logs as it goes, so its needle is in the last stderr line).

Safety: every server a row names is unreachable (127.0.0.1 port 1) or an embedded chDB
directory in the test's temp dir (`{store}`: a schema and telemetry of POP lax, made once per
module); PATH holds no tools, so a lab or demo row that wrongly passes validation cannot build
namespaces (it fails on the missing iproute2 instead).
"""

from __future__ import annotations

import gzip
import importlib.metadata
import ipaddress
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.rollout.signing import keygen
from controller.scoring.explain import check_prefix
from dyncc_common.errors import ConfigError
from dyncc_common.names import POP_NAME, check_brokers, check_pop

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 10.0  # seconds a row may take
STORE_TIMEOUT = 60.0  # a row that opens a chDB store (loading chDB is slow on a busy machine)
CH = "clickhouse://default:@127.0.0.1:1/default"  # nothing listens on port 1
KF = "127.0.0.1:1"
BAD_POP = "a/../b"


@dataclass(frozen=True)
class Row:
    argv: tuple[str, ...]
    needle: str | None  # must appear in the one stderr line
    code: int = 2  # bad input is 2; a run that started and failed (nothing delivered) is 1
    stdout: bool = False  # the needle is the one line on stdout, and stderr is empty (--version)
    logs: bool = False  # a run that logs as it goes: the needle is in its last stderr line
    timeout: float = 0.0  # seconds the row may take (0: TIMEOUT)

    @property
    def id(self) -> str:
        return " ".join(self.argv)[:90] or "(no arguments)"


def row(
    needle: str | None, *argv: str, code: int = 2, stdout: bool = False, logs: bool = False, timeout: float = 0.0
) -> Row:
    return Row(tuple(argv), needle, code, stdout, logs, timeout)


COLLECT = ("collect", "--brokers", KF)  # a row that slipped through must not reach a real broker
AGENT = ("agent", "--pop", "lax", "--public-key", "{pub}", "--state-dir", "{tmp}/agent-state")
AGENT_K = (*AGENT, "--kafka", KF)
INGEST = ("ingest", "--clickhouse", CH, "--kafka", KF)
ONCE = ("control", "--clickhouse", CH, "--once")
PUB = (*ONCE, "--publish-dir", "{tmp}/pub", "--key", "{key}")
EXPLAIN = ("control", "--clickhouse", CH, "explain")
ADVANCE = ("control", "rollout", "advance", "--clickhouse", CH, "--publish-dir", "{tmp}/pub")
KILL = ("control", "kill-switch", "--clickhouse", CH)
KILL_PUB = ("--publish-dir", "{tmp}/pub", "--key", "{key}")
REPORT = ("report", "--clickhouse", CH, "-o", "{tmp}/report.html")
ACCESS = ("access-log", "--clickhouse", CH, "--pop", "lax")
DEMO = ("demo", "--replay", "--workdir", "{tmp}/demo")
AT = "2024-03-01T12:00:30Z"  # a round at the end of the telemetry of {store}
STORE_START = "2024-03-01T09:00:00Z"  # its first 5-minute bucket (36 of them)
NO_STORE = "chdb://{tmp}/no-such-store"  # a chDB directory that does not exist
VERSION = f"dyncc {importlib.metadata.version('dyncc')}"
STORE_EXPLAIN = ("control", "--clickhouse", "{store}", "explain", "--pop", "lax")
STORE_STATUS = ("control", "rollout", "status", "--clickhouse", "{store}")
PIN = ("control", "--clickhouse", CH, "pin", "198.51.100.0/24", "--pop", "lax")
STORE_CONTROL = ("control", "--clickhouse", "{store}")
NO_STORE_EXPLAIN = ("control", "--clickhouse", NO_STORE, "explain", "--pop", "lax")

ROWS = [
    # dyncc itself
    row("no subcommand"),
    row("unknown subcommand", "nosuch"),
    row(VERSION, "--version", code=0, stdout=True),
    # collect
    row("interval", *COLLECT, "--interval", "bad"),
    row("interval", *COLLECT, "--interval", "0"),
    row("jitter", *COLLECT, "--interval", "10s", "--jitter", "20s"),
    row("timeout", *COLLECT, "--timeout", "0"),
    row("timeout", *COLLECT, "--timeout=-5s"),
    row("--sink", *COLLECT, "--sink", "bogus"),
    row("--out", *COLLECT, "--sink", "file"),
    row("--out", *COLLECT, "--sink", "file", "--out", "{garbage}/sub/batches.bin"),
    row("brokers", "collect", "--brokers", ""),
    row("brokers", "collect", "--brokers", "127.0.0.1:abc"),
    row("topic", *COLLECT, "--topic", "bad topic!"),
    row("queue-max-bytes", *COLLECT, "--queue-max-bytes", "lots"),
    row("linger", *COLLECT, "--linger", "xyz"),
    row("flush-timeout", *COLLECT, "--flush-timeout", "abc"),
    row("rotate-bytes", *COLLECT, "--rotate-bytes=-1"),
    row("keep", *COLLECT, "--keep", "abc"),
    row("keep", *COLLECT, "--keep", "5000"),
    row("dyd-nonexistent", *COLLECT, "--netns", "dyd-nonexistent"),
    row("bogus", *COLLECT, "--state", "bogus"),
    row("port", *COLLECT, "--port", "70000"),
    row("port", *COLLECT, "--port", "abc"),
    row("not-a-cidr", *COLLECT, "--exclude", "not-a-cidr"),
    row("sample", *COLLECT, "--sample", "0"),
    row("min-bytes-acked", *COLLECT, "--min-bytes-acked=-5"),
    row("prefix-v4", *COLLECT, "--prefix-v4", "33"),
    row("prefix-v6", *COLLECT, "--prefix-v6", "200"),
    row("max-rows", *COLLECT, "--max-rows", "0"),
    row("max-bytes", *COLLECT, "--max-bytes", "10"),
    row("metrics-port", *COLLECT, "--metrics-port", "70000"),
    row("--pop", *COLLECT, "--pop", BAD_POP),
    row("cannot read config", *COLLECT, "--config", "{missing}"),
    row("TOML", *COLLECT, "--config", "{bad_toml}"),
    row("no_such", *COLLECT, "--config", "{collect_unknown}"),
    # docs/cli.md: 2 = nothing was done (bad input, or a server that does not answer at start); 1 = the
    # run started and could not deliver: collect does not wait for the broker before its dump
    row("not delivered", "collect", "--once", "--brokers", KF, "--flush-timeout", "3s", code=1),
    # agent
    row("required", "agent"),
    row("exactly one of --kafka", *AGENT),
    row("exactly one of --kafka", *AGENT_K, "--from-file", "{garbage}", "--once"),
    row("--once", *AGENT, "--from-file", "{garbage}"),
    row("--once", *AGENT_K, "--once"),
    row("--pop", *AGENT_K, "--pop", "  "),
    row("--pop", *AGENT_K, "--pop", BAD_POP),
    row("--proto", *AGENT_K, "--proto", "4"),
    row("--proto", *AGENT_K, "--proto", "300"),
    row("--proto", *AGENT_K, "--proto", "abc"),
    row("dyd-nonexistent", *AGENT_K, "--netns", "dyd-nonexistent"),
    row("reconcile-every", *AGENT_K, "--reconcile-every", "0"),
    row("reconcile-every", *AGENT_K, "--reconcile-every", "soon"),
    row("public key", *AGENT_K, "--public-key", "{missing}"),
    row("public key", *AGENT_K, "--public-key", "{garbage}"),
    row("cannot read config file", *AGENT, "--from-file", "{missing}", "--once"),
    row("not a CongestionConfig", *AGENT, "--from-file", "{garbage}", "--once"),
    row("metrics-port", *AGENT_K, "--metrics-port", "70000"),
    row("--kafka", *AGENT, "--kafka", "127.0.0.1:abc"),
    row("--config-topic", *AGENT_K, "--config-topic", "bad topic"),
    row("--status-topic", *AGENT_K, "--status-topic", ""),
    row("--host", *AGENT_K, "--host", ""),
    row("--state-dir", *AGENT_K, "--state-dir", "{garbage}"),
    row("no_such_option", *AGENT_K, "--config", "{unknown_toml}"),
    row("TOML", *AGENT_K, "--config", "{bad_toml}"),
    row("proto", *AGENT_K, "--config", "{agent_typed}"),
    # ingest
    row("--kafka", "ingest", "--clickhouse", CH),
    row("either", *INGEST, "--from-file", "{empty}"),
    row("no such file", "ingest", "--clickhouse", CH, "--from-file", "{missing}"),
    row("--max-rows", *INGEST, "--max-rows", "0"),
    row("--max-rows", *INGEST, "--max-rows", "many"),
    row("--min-rows", *INGEST, "--min-rows=-1"),
    row("--max-bytes", *INGEST, "--max-bytes", "0"),
    row("--inserters", *INGEST, "--inserters", "0"),
    row("max-wait", *INGEST, "--max-wait", "soon"),
    row("backoff-max", *INGEST, "--backoff-max", "soon"),
    row("70000", *INGEST, "--metrics-port", "70000"),
    row("--kafka", "ingest", "--clickhouse", CH, "--kafka", "127.0.0.1:abc"),
    row("--topic", *INGEST, "--topic", "bad topic"),
    row("--group", *INGEST, "--group", ""),
    row("scheme", "ingest", "--from-file", "{empty}", "--clickhouse", "mysql://127.0.0.1:1/x"),
    row("port", "ingest", "--from-file", "{empty}", "--clickhouse", "clickhouse://127.0.0.1:notaport/db"),
    row("database", "ingest", "--from-file", "{empty}", "--clickhouse", "clickhouse://127.0.0.1:1/bad-name"),
    row("127.0.0.1:1", "ingest", "--from-file", "{empty}", "--clickhouse", CH, "--metrics-port", "0"),
    row(
        KF,
        "ingest",
        "--clickhouse",
        "chdb://{tmp}/chdb-ingest",
        "--kafka",
        KF,
        "--drain",
        "--connect-timeout",
        "3s",
        "--metrics-port",
        "0",
    ),
    # --drain without --connect-timeout: a short start probe, said within seconds (was 30 s)
    row(
        "within 5s (--drain: at most 5s)",
        *("ingest", "--clickhouse", "chdb://{tmp}/chdb-drain", "--kafka", KF, "--drain", "--metrics-port", "0"),
    ),
    row("max_rows", *INGEST, "--config", "{ingest_typed}"),
    row("no_such_option", *INGEST, "--config", "{unknown_toml}"),
    row("--config", *INGEST, "--config"),
    # access-log
    row("--clickhouse", "access-log", "--pop", "lax", "{empty}"),
    row("--pop", "access-log", "--clickhouse", CH, "{empty}"),
    row("--pop", *ACCESS[:3], "--pop", BAD_POP, "{empty}"),
    row("FILE", *ACCESS),
    row("no such file", *ACCESS, "{missing}"),
    row("twice", *ACCESS, "{empty}", "{empty}"),
    row("--host", *ACCESS, "--host", "a b", "{empty}"),
    row("--host", *ACCESS, "--host", "h" * 256, "{empty}"),
    row("--follow", *ACCESS, "--follow", "0", "{empty}"),
    row("--follow", *ACCESS, "--follow", "soon", "{empty}"),
    row("--prefix-v4", *ACCESS, "--prefix-v4", "33", "{empty}"),
    row("--prefix-v6", *ACCESS, "--prefix-v6", "129", "{empty}"),
    row("--chunk-lines", *ACCESS, "--chunk-lines", "0", "{empty}"),
    row("--chunk-bytes", *ACCESS, "--chunk-bytes", "4KiB", "{empty}"),
    row("--metrics-port", *ACCESS, "--metrics-port", "70000", "{empty}"),
    row("scheme", "access-log", "--clickhouse", "mysql://127.0.0.1:1/x", "--pop", "lax", "{empty}"),
    row("127.0.0.1:1", *ACCESS, "{empty}"),
    row("127.0.0.1:1", *ACCESS, "--follow", "1s", "{empty}"),
    row("no_such_option", *ACCESS, "{empty}", "--config", "{unknown_toml}"),
    row("chunk_lines", *ACCESS, "{empty}", "--config", "{access_typed}"),
    # control: scoring, decisions, the scheduler
    row("--clickhouse", "control", "--once"),
    row("scheme", "control", "--clickhouse", "http://127.0.0.1:1", "--once"),
    row("--at", *ONCE, "--at", "yesterday"),
    row("every", "control", "--clickhouse", CH, "--every", "soon"),
    row("every", "control", "--clickhouse", CH, "--every", "0"),
    row("delay", "control", "--clickhouse", CH, "--delay", "10m"),
    row("delay", "control", "--clickhouse", CH, "--delay", "soon"),
    row("metrics", "control", "--clickhouse", CH, "--metrics-port", "70000"),
    row("bucket", *ONCE, "--bucket", "bad"),
    row("lookback", *ONCE, "--lookback", "7m"),
    row("min-bytes", *ONCE, "--min-bytes=-1"),
    row("min-samples", *ONCE, "--min-bucket-samples", "0"),
    row("threshold-quantile", *ONCE, "--threshold-quantile", "1.5"),
    row("min-buckets", *ONCE, "--min-buckets", "0"),
    row("min-duty", *ONCE, "--min-duty", "2"),
    row("max-flap", *ONCE, "--max-flap=-0.5"),
    row("min-rtt", *ONCE, "--min-rtt", "fast"),
    row("holdout", *ONCE, "--holdout", "1.5"),
    row("min-hold", *ONCE, "--min-hold", "forever"),
    row("cooldown", *ONCE, "--cooldown", "soon"),
    row("revert-margin", *ONCE, "--revert-margin", "2"),
    row("expire", *ONCE, "--expire", "never"),
    row("negative", *ONCE, "--max-bbr-per-pop=-1"),
    row("negative", *ONCE, "--max-new=-1"),
    row("algorithm", *ONCE, "--algorithm", "nope"),
    row("--pop", *ONCE, "--pop", BAD_POP),
    row("max_new", "control", "--clickhouse", CH, "--once", "--config", "{control_typed}"),
    row("no_such_option", *ONCE, "--config", "{unknown_toml}"),
    # control --once: a round that ran but could not publish lax's config (lax.cfg is a directory)
    # exits 1, as its --help says
    row(
        "not published for lax",
        *("control", "--clickhouse", "{store}", "--once", "--at", AT, "--holdout", "0", "--trial-blocks", "0"),
        *("--publish-dir", "{blocked}", "--key", "{key}"),
        code=1,
        logs=True,
        timeout=STORE_TIMEOUT,
    ),
    # control: publishing, validation and rollout options (checked at start, not at publish time)
    row("key", *ONCE, "--publish-dir", "{tmp}/pub", "--key", "{missing}"),
    row("key", *ONCE, "--publish-dir", "{tmp}/pub", "--key", "{garbage}"),
    row("publish-dir", *ONCE, "--publish-dir", "{garbage}/sub", "--key", "{key}"),
    row("--kafka", *ONCE, "--kafka", "127.0.0.1:abc", "--key", "{key}"),
    row("topic", *ONCE, "--kafka", KF, "--key", "{key}", "--config-topic", "bad topic"),
    row("--status-topic", *ONCE, "--kafka", KF, "--key", "{key}", "--status-topic", "bad topic"),
    row("--key", *ONCE, "--kafka", KF),
    row("deny", *PUB, "--deny", "not-a-cidr"),
    row("v4-length", *PUB, "--v4-length", "0"),
    row("v6-length", *PUB, "--v6-length", "200"),
    row("max-per-pop", *PUB, "--max-per-pop=-1"),
    row("max-change-fraction", *PUB, "--max-change-fraction", "2"),
    row("change-floor", *PUB, "--change-floor=-1"),
    row("allowed-algorithms", *PUB, "--allowed-algorithms", ""),
    row("--staging", *PUB, "--staging", "bogus"),
    row("canary-hosts", *PUB, "--canary-hosts", "nocolon"),
    row("canary-fraction", *PUB, "--canary-fraction", "0"),
    row("hosts", *PUB, "--hosts", ":h1"),
    row("inventory", *PUB, "--inventory", "{missing}"),
    row("inventory", *PUB, "--inventory", "{bad_toml}"),
    row("soak", *PUB, "--soak", "soon"),
    row("wave-timeout", *PUB, "--wave-timeout", "soon"),
    row("baseline", *PUB, "--baseline", "soon"),
    row("min-mem-available", *PUB, "--min-mem-available", "lots"),
    row("max-load", *PUB, "--max-load=-1"),
    row("max-p10-regression", *PUB, "--max-p10-regression", "2"),
    row("min-samples", *PUB, "--min-samples=-1"),
    row("host-expiry", *PUB, "--host-expiry", "soon"),
    row("holddown", *PUB, "--holddown", "soon"),
    # control explain
    row("--prefix", *EXPLAIN, "--pop", "lax"),
    row("--prefix", *EXPLAIN, "--pop", "lax", "--prefix", "not-a-prefix"),
    row("host bits", *EXPLAIN, "--pop", "lax", "--prefix", "203.0.113.5/24"),
    row("--prefix", *EXPLAIN, "--pop", "lax", "--prefix", "203.0.113.0"),
    row("--pop", *EXPLAIN, "--pop", BAD_POP, "--prefix", "203.0.113.0/24"),
    row("--pop", *EXPLAIN, "--pop", "", "--prefix", "203.0.113.0/24"),
    row("--at", *EXPLAIN, "--pop", "lax", "--prefix", "203.0.113.0/24", "--at", "someday"),
    row("--clickhouse", "control", "explain", "--pop", "lax", "--prefix", "203.0.113.0/24"),
    row("min-buckets", *EXPLAIN, "--pop", "lax", "--prefix", "203.0.113.0/24", "--min-buckets", "0"),
    row("unknown prefix 192.0.2.0/24", *STORE_EXPLAIN, "--prefix", "192.0.2.0/24", "--at", AT, timeout=STORE_TIMEOUT),
    row("no-such-store: the directory does not exist", *NO_STORE_EXPLAIN, "--prefix", "203.0.113.0/24"),
    # control keygen
    row("--out-dir", "control", "keygen"),
    row("exists", "control", "keygen", "--out-dir", "{keys}"),
    row("cannot write", "control", "keygen", "--out-dir", "{garbage}/sub"),
    row("--name", "control", "keygen", "--out-dir", "{tmp}/keys2", "--name", "../evil"),
    # control rollout
    row("rollout_action", "control", "rollout"),
    row("invalid choice", "control", "rollout", "bogus"),
    row("--clickhouse", "control", "rollout", "status"),
    row("--pop", "control", "rollout", "status", "--clickhouse", CH, "--pop", BAD_POP),
    row("127.0.0.1:1", "control", "rollout", "status", "--clickhouse", CH),
    row("unknown POP 'laxx'", *STORE_STATUS, "--pop", "laxx", timeout=STORE_TIMEOUT),
    # control pin / unpin / pins
    row("--algorithm", *PIN, "--by", "a", "--why", "b"),
    row("invalid choice", *PIN, "--algorithm", "x"),
    row("--why is empty", *PIN, "--algorithm", "cubic", "--by", "a", "--why", " "),
    row(
        "unknown POP 'laxx'",
        *(*STORE_CONTROL, "pin", "198.51.100.0/24", "--pop", "laxx", "--algorithm", "bbr", "--by", "a", "--why", "b"),
        timeout=STORE_TIMEOUT,
    ),
    row("not pinned", *STORE_CONTROL, "unpin", "198.51.100.0/24", "--pop", "lax", "--by", "a", timeout=STORE_TIMEOUT),
    row("--key", *ADVANCE),
    row("private key", *ADVANCE, "--key", "{missing}"),
    row("--kafka", "control", "rollout", "advance", "--clickhouse", CH, "--kafka", "127.0.0.1:abc", "--key", "{key}"),
    # control kill-switch
    row("--pop", "control", "kill-switch"),
    row("not allowed with", *KILL, "--pop", "lax", "--all", *KILL_PUB),
    row("--pop", *KILL, "--pop", BAD_POP, *KILL_PUB),
    row("--pop", *KILL, "--pop", BAD_POP, "--force", *KILL_PUB),
    row("--pop", *KILL, "--pop", "", *KILL_PUB),
    row("--clickhouse", "control", "kill-switch", "--pop", "lax", *KILL_PUB),
    row("--key", *KILL, "--pop", "lax", "--publish-dir", "{tmp}/pub"),
    row("nowhere to publish", *KILL, "--pop", "lax", "--key", "{key}"),
    row("private key", *KILL, "--pop", "lax", "--publish-dir", "{tmp}/pub", "--key", "{garbage}"),
    row("publish-dir", *KILL, "--pop", "lax", "--publish-dir", "{garbage}/sub", "--key", "{key}"),
    row("--kafka", *KILL, "--pop", "lax", "--kafka", "127.0.0.1:abc", "--key", "{key}"),
    row("--config-topic", *KILL, "--pop", "lax", "--kafka", KF, "--key", "{key}", "--config-topic", "a b"),
    row("canary-fraction", "control", "--canary-fraction", "0", *KILL[1:], "--pop", "lax", *KILL_PUB),
    row("127.0.0.1:1", *KILL, "--pop", "lax", *KILL_PUB),
    # report
    row("--clickhouse", "report"),
    row("--since", *REPORT, "--since", "yesterday"),
    row("--until", *REPORT, "--until", "never"),
    row("not before", *REPORT, "--since", "2024-03-02T00:00", "--until", "2024-03-01T00:00"),
    row("--since", *REPORT, "--since", "6x"),
    row("--bucket", *REPORT, "--bucket", "0"),
    row("--bucket", *REPORT, "--bucket", "2d"),
    row("--bucket", *REPORT, "--bucket", "soon"),
    row("asn-file", *REPORT, "--asn-file", "{missing}"),
    row("asn-file", *REPORT, "--asn-file", "{garbage}"),
    row("output", "report", "--clickhouse", CH, "-o", "{garbage}/sub/report.html"),
    row("output", "report", "--clickhouse", CH, "-o", "{tmp}"),
    row("--pop", *REPORT, "--pop", BAD_POP),
    row("scheme", "report", "--clickhouse", "ftp://127.0.0.1:1/x"),
    row("127.0.0.1:1", *REPORT),
    row("no_such_option", *REPORT, "--config", "{unknown_toml}"),
    row("no-such-store: the directory does not exist", "report", "--clickhouse", NO_STORE, "-o", "{tmp}/r.html"),
    row(
        "run 'dyncc schema apply' first",
        *("report", "--clickhouse", "chdb://{bare}", "-o", "{tmp}/r.html"),
        timeout=STORE_TIMEOUT,
    ),
    # demo
    row("--duration", *DEMO, "--duration", "soon"),
    row("--duration", *DEMO, "--duration", "10s"),
    row("round-seconds", *DEMO, "--round-seconds", "0"),
    row("round-seconds", *DEMO, "--round-seconds", "abc"),
    row("--duration", "demo", "--duration", "1s"),
    row("recording", *DEMO, "--recording", "{missing}"),
    row("recording", *DEMO, "--recording", "{garbage}"),
    row(".json", *DEMO, "--recording", "{rec_nometa}"),
    row("metadata", *DEMO, "--recording", "{rec_badmeta}"),
    row("workdir", "demo", "--replay", "--workdir", "{garbage}"),
    row("output", *DEMO, "-o", "{garbage}/sub/report.html"),
    row("no_such_option", *DEMO, "--config", "{unknown_toml}"),
    # lab (PATH has no ip/tc: a row that slipped through validation could not build anything)
    row("round-seconds", "lab", "--round-seconds", "1"),
    row("rounds", "lab", "--rounds=-1"),
    row("duration", "lab", "--duration", "soon"),
    row("poll-interval", "lab", "--poll-interval", "10ms"),
    row("lookback-buckets", "lab", "--lookback-buckets", "1"),
    row("min-buckets", "lab", "--min-buckets", "20"),
    row("min-hold-buckets", "lab", "--min-hold-buckets", "0"),
    row("max-new", "lab", "--max-new", "0"),
    row("think-time", "lab", "--think-time", "100ms"),
    row("pops must be 1-2", "lab", "--pops", "3"),
    row("hosts per POP", "lab", "--hosts-per-pop", "0"),
    row("cannot hold", "lab", "--prefixes-per-pop", "10"),
    row("lossy", "lab", "--lossy=-1"),
    row("alternating", "lab", "--alternating=-1"),
    row("--deep", "lab", "--deep", "abc"),
    row("threshold-quantile", "lab", "--threshold-quantile", "1"),
    row("holdout", "lab", "--holdout", "1"),
    row("scheme", "lab", "--store", "mysql://127.0.0.1:1/x"),
    row("store-dir", "lab", "--store-dir", "{garbage}"),
    row("--kafka", "lab", "--kafka", "127.0.0.1:abc"),
    row("--record", "lab", "--record", "{garbage}/sub/rec.bin.gz"),
    row("run-id", "lab", "--run-id", "bad-id!"),
    row("no_such_option", "lab", "--config", "{unknown_toml}"),
    row("--pops", "lab", "--cleanup", "--pops", "x"),
    # schema
    row("required", "schema"),
    row("--clickhouse", "schema", "apply"),
    row("invalid choice", "schema", "bogus", "--clickhouse", CH),
    row("scheme", "schema", "apply", "--clickhouse", "mysql://127.0.0.1:1/x"),
    row("127.0.0.1:1", "schema", "apply", "--clickhouse", CH),
    row("database", "schema", "status", "--clickhouse", "clickhouse://127.0.0.1:1/bad-db"),
    row("no_such_option", "schema", "apply", "--clickhouse", CH, "--config", "{unknown_toml}"),
    row("--cluster", "schema", "apply", "--clickhouse", CH, "--cluster", "bad-name"),
    row("--cluster", "schema", "apply", "--clickhouse", "chdb:///tmp/x", "--cluster", "dyncc"),
    row("contradicts", "schema", "apply", "--clickhouse", CH + "?cluster=a", "--cluster", "b"),
    row("cluster", "schema", "apply", "--clickhouse", CH.replace("/default", "/x") + "?cluster=bad-name"),
]


#: makes the rows' {store} in a child process (chDB allows one directory per process)
MAKE_STORE = """
import sys
import datetime as dt
from controller.store import open_store
from controller.store.migrate import apply_migrations
from tests.support import scoring_synth as synth
store = open_store(sys.argv[1])
apply_migrations(store)
start = int(dt.datetime.fromisoformat(sys.argv[2].replace("Z", "+00:00")).timestamp())
patterns = {f"198.51.{i}.0/24": synth.NORMAL for i in range(20)} | {"203.0.113.0/24": synth.STEADY_BAD}
synth.insert_samples(store, synth.samples_frame("lax", patterns, start, 36))
store.close()
"""


def make_store(url: str) -> None:
    """A chDB store with the schema and 3 h of POP lax's telemetry (20 normal prefixes, 1 bad)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", MAKE_STORE, url, STORE_START], cwd=ROOT, env=env, check=True, timeout=120)


def make_files(tmp: Path) -> dict[str, str]:
    """The files the rows name, in `tmp`: garbage, broken TOML, a real key pair, recordings, a
    chDB store with telemetry, a bare directory and a publish directory that cannot take lax's config."""
    (tmp / "nobin").mkdir()
    (tmp / "bare").mkdir()
    (tmp / "blocked" / "lax.cfg").mkdir(parents=True)  # the config file cannot be replaced
    store = f"chdb://{tmp / 'store'}?ttl=off"
    make_store(store)
    (tmp / "garbage.bin").write_bytes(b"\xff\xfe this is not what you think \x00\x01")
    (tmp / "empty.bin").write_bytes(b"")
    (tmp / "bad.toml").write_text("pop = \n")
    (tmp / "unknown.toml").write_text("no_such_option = 1\n")
    (tmp / "collect_unknown.toml").write_text("[collect]\nno_such = 1\n")
    (tmp / "agent_typed.toml").write_text("proto = [1, 2]\n")
    (tmp / "ingest_typed.toml").write_text('[ingest]\nmax_rows = "many"\n')
    (tmp / "access_typed.toml").write_text('[access-log]\nchunk_lines = "many"\n')
    (tmp / "control_typed.toml").write_text("[control]\nmax_new = 1.5\n")
    private, public = keygen(tmp / "keys")
    with gzip.open(tmp / "nometa.bin.gz", "wb") as fh:
        fh.write(b"\x00\x00\x00\x01x")
    with gzip.open(tmp / "badmeta.bin.gz", "wb") as fh:
        fh.write(b"\x00\x00\x00\x01x")
    (tmp / "badmeta.bin.gz.json").write_text("{}")
    return {
        "tmp": str(tmp),
        "nobin": str(tmp / "nobin"),
        "garbage": str(tmp / "garbage.bin"),
        "empty": str(tmp / "empty.bin"),
        "missing": str(tmp / "missing-file"),
        "bad_toml": str(tmp / "bad.toml"),
        "unknown_toml": str(tmp / "unknown.toml"),
        "collect_unknown": str(tmp / "collect_unknown.toml"),
        "agent_typed": str(tmp / "agent_typed.toml"),
        "ingest_typed": str(tmp / "ingest_typed.toml"),
        "access_typed": str(tmp / "access_typed.toml"),
        "control_typed": str(tmp / "control_typed.toml"),
        "key": str(private),
        "pub": str(public),
        "keys": str(tmp / "keys"),
        "rec_nometa": str(tmp / "nometa.bin.gz"),
        "rec_badmeta": str(tmp / "badmeta.bin.gz"),
        "store": store,
        "bare": str(tmp / "bare"),
        "blocked": str(tmp / "blocked"),
    }


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return make_files(tmp_path_factory.mktemp("bad-inputs"))


def run_dyncc(
    argv: list[str], nobin: str, root: Path = ROOT, timeout: float = TIMEOUT
) -> tuple[int | None, str, float, str]:
    """(exit code or None on timeout, stderr, seconds, stdout); a timed-out run's process group is killed."""
    env = {**os.environ, "PATH": nobin, "OPENBLAS_NUM_THREADS": "1"}
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dyncc.cli", *argv],
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, err, time.monotonic() - started, out
    return proc.returncode, err, time.monotonic() - started, out


_HOSTS = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z0-9-]{1,10}){0,2}", fullmatch=True),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda a: f"[{a}]"),
)


@given(st.lists(st.tuples(_HOSTS, st.integers(1, 65535)), min_size=1, max_size=4))
def test_broker_lists_are_accepted(items: list[tuple[str, int]]) -> None:
    text = ",".join(f"{host}:{port}" for host, port in items)
    assert check_brokers(text) == text


@given(
    _HOSTS, st.one_of(st.integers(65536, 10**6).map(str), st.just("0"), st.from_regex(r"[a-z]{1,5}", fullmatch=True))
)
def test_broker_with_a_bad_port_is_refused(host: str, port: str) -> None:
    with pytest.raises(ConfigError, match="host:port"):
        check_brokers(f"127.0.0.1:9092,{host}:{port}")


@given(st.from_regex(POP_NAME, fullmatch=True), st.sampled_from(["/", "/../", " ", "\\", "\n"]))
def test_pop_names(name: str, bad: str) -> None:
    assert check_pop(name) == name
    with pytest.raises(ConfigError, match="POP name"):
        check_pop(name + bad + name)


@given(st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)), st.data())
def test_prefixes_canonical_or_refused(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, data: st.DataObject
) -> None:
    length = data.draw(st.integers(0, address.max_prefixlen))
    net = ipaddress.ip_network((address, length), strict=False)
    assert check_prefix(str(net)) == str(net)
    assert check_prefix(str(net).upper()) == str(net)
    if net.network_address != address:
        with pytest.raises(ConfigError, match="host bits set"):
            check_prefix(f"{address}/{length}")


def test_table_is_large_and_covers_every_subcommand() -> None:
    assert len(ROWS) > 100
    assert len({r.argv for r in ROWS}) == len(ROWS), "duplicate rows"
    firsts = {r.argv[0] for r in ROWS if r.argv}
    assert firsts == {
        "nosuch",
        "--version",
        "collect",
        "agent",
        "ingest",
        "access-log",
        "control",
        "report",
        "demo",
        "lab",
        "schema",
    }
    assert {"explain", "keygen", "rollout", "kill-switch"} <= {arg for r in ROWS for arg in r.argv}


@pytest.mark.parametrize("case", ROWS, ids=[r.id for r in ROWS])
def test_bad_input_is_one_line_no_traceback_and_its_exit_code(case: Row, files: dict[str, str]) -> None:
    argv = [arg.format(**files) for arg in case.argv]
    timeout = case.timeout or TIMEOUT
    code, err, seconds, out = run_dyncc(argv, files["nobin"], timeout=timeout)
    assert code is not None, f"still running after {timeout:.0f}s; stderr: {err[-1500:]}"
    assert "Traceback" not in err, err[-3000:]
    lines = (out if case.stdout else err).strip().splitlines()
    assert code == case.code, f"exit {code}: {err[-1500:]}"
    if case.stdout:
        assert not err, err[-1500:]
    if case.logs:
        lines = lines[-1:]
    assert len(lines) == 1, f"{len(lines)} lines on {'stdout' if case.stdout else 'stderr'}:\n{err[-1500:]}"
    if case.needle is not None:
        assert case.needle in lines[0], lines[0]
    assert seconds < timeout


def test_readers_never_create_a_chdb_store_schema_apply_does(files: dict[str, str]) -> None:
    """explain and report refuse a chDB directory that does not exist (the table's rows) and leave
    it so; `dyncc schema apply` creates it."""
    path = Path(files["tmp"]) / "made-by-schema-apply"
    url = f"chdb://{path}"
    for argv in (
        ["control", "--clickhouse", url, "explain", "--pop", "lax", "--prefix", "203.0.113.0/24"],
        ["report", "--clickhouse", url, "-o", f"{files['tmp']}/r.html"],
    ):
        code, err, _, _ = run_dyncc(argv, files["nobin"])
        assert code == 2 and "does not exist" in err, err
        assert not path.exists()
    code, err, _, out = run_dyncc(["schema", "apply", "--clickhouse", url], files["nobin"], timeout=60)
    assert code == 0, err
    assert path.is_dir() and "applied" in out
