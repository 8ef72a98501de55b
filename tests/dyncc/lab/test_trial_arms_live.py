"""Trials through the real staged rollout: the lab (one POP, two edge hosts, real namespaces, nginx
and HTTP clients on shaped paths) runs rounds of the real controller with trials, its configs go
over the shared Kafka broker to the edge agents (canary host first), the collectors' tcpinfo goes
over Kafka into the ingest loader and a ClickHouse 18.16 database of its own.  From the store
only, per trial: the arm each counted round asked for per bucket (trial_rounds of rounds whose
outcome counts), the arm the bucket's qualifying samples really ran (tcpinfo's own congestion
control), that once the prefix's first BBR bucket was realized POP-wide (its canary passed) each
asked toggle is realized in the very bucket after its round (no wave wait), and that an ended
trial's counted buckets alternate (>= 2 realized blocks per arm, >= 2 switches).

Slow (about 3.5 minutes), root only; namespaces dlab-h9..., topics dyncc-lab-h9...-*.

Toggles no longer wait for waves (controller/rollout/toggles.py: published POP-wide, and on a
canary's candidate, while another prefix's wave is in flight; a new prefix's canary starts in the
round its toggles go out).  Measured before that (3 runs): 11 trial rounds held after the first BBR
bucket, 0-1 trials ended; after it: 0 held, 2 of 5 trials ended on 4-5 switches.  Still open, and
reported as an expected failure when it shows: a config is in force 1.5-5.3 s into the 8 s bucket
after its round, so the first bucket after a toggle is often mixed or on the old arm (15 asks in
one run).  The first BBR bucket is the first one on BBR on every host of the POP (one where only
the canary host had samples reads BBR too)."""

from __future__ import annotations

import datetime as dt
import io
import itertools
import logging
import secrets
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from controller.evidence.load import Evidence, SampleRule, asked_arms, stored_trials
from controller.evidence.model import BBR, CUBIC
from controller.evidence.summary import RUNNING
from controller.rollout import records as rs
from controller.scoring.settings import ROLLUP_MIN_BYTES
from controller.store import Store
from dyncc.lab.control import make_control_factory
from dyncc.lab.loop import Lab, LabOptions
from dyncc.lab.model import LabScoring
from dyncc.lab.run import open_lab_store
from dyncc.lab.topology import Layout, lab_namespaces
from dyncc_common.runtime import StopFlag
from tests.conftest import KAFKA_BROKERS
from tests.support.netns_util import require_root

pytestmark = [
    pytest.mark.slow,
    pytest.mark.netns,
    pytest.mark.kafka,
    pytest.mark.clickhouse,
]

log = logging.getLogger("tests.trial_arms_live")

ROUND_SECONDS = 8
ROUNDS = 20  # trials start in rounds 2-9; 20 leave most of them time to end (16 ended 0 of 4 under load)
# one POP of two edge hosts (the first its canary); 3 lossy and 2 deep prefixes (candidates),
# 3 fine ones (the threshold's reference and the POP's concurrent controls)
LAYOUT = Layout(pops=1, hosts_per_pop=2, per_pop=8, lossy=3, deep=2, alternating=0, lowrtt=0)
# trials from round 2, no holdout (every candidate trials), judged from 4 realized blocks (2 pairs), at
# most 6 (their time limit, 3 x 6 rounds, lies at or past the run's end: a trial ends by its rule or its blocks)
SCORING = LabScoring(lookback_buckets=3, min_buckets=2, holdout_fraction=0.0, trial_blocks=6, min_hold_buckets=2)

REALIZED_SQL = """
SELECT pop, prefix, intDiv(toUInt32(time), %(bs)s) * %(bs)s AS ts,
       toUInt64(countIf(startsWith(cc, 'bbr'))) AS bbr, toUInt64(countIf(cc = 'cubic')) AS cubic,
       uniqExactIf(host, startsWith(cc, 'bbr')) AS bbr_hosts
FROM tcpinfo
WHERE bytes_acked > %(min_bytes)s AND delivery_rate > 0 AND app_limited = 0
GROUP BY pop, prefix, ts
"""
# the arm each trial round asked, with its round's latest outcome (held rounds published nothing)
ASKED_SQL = """
SELECT pop, prefix, toUInt32(trial_since), toUInt32(round_time), decision, algorithm, status
FROM trial_rounds
ANY LEFT JOIN
(
    SELECT pop, round_id, argMax(status, recorded_ns) AS status FROM round_outcomes GROUP BY pop, round_id
) USING (pop, round_id)
ORDER BY pop, prefix, trial_since, round_time
"""
WAVES_SQL = "SELECT updated_ns, event, reason FROM rollout_waves ORDER BY updated_ns"
# when each host's agent reported a config in force (its reported_at_ns), per version
APPLIED_SQL = """
SELECT pop, host, applied_version, min(reported_ns) FROM apply_status
WHERE applied_version > 0 AND result IN ('APPLIED', 'UNCHANGED') GROUP BY pop, host, applied_version
"""
COUNTS = ("published", "unchanged", "legacy", "recorded")


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _realized(
    store: Store, purity: float, min_samples: int
) -> tuple[dict[tuple[str, str, int], str], dict[tuple[str, str, int], int]]:
    """(pop, prefix, bucket) -> 'bbr' / 'cubic' / 'mixed' (every host's qualifying samples), and
    -> how many hosts had samples on BBR in it."""
    out: dict[tuple[str, str, int], str] = {}
    bbr_hosts: dict[tuple[str, str, int], int] = {}
    for pop, prefix, ts, n_b, n_c, hosts in store.query_rows(
        REALIZED_SQL, {"bs": ROUND_SECONDS, "min_bytes": ROLLUP_MIN_BYTES}
    ):
        n_b, n_c = int(n_b), int(n_c)
        total = n_b + n_c
        arm = "mixed"
        if total and n_b >= purity * total and n_b >= min_samples:
            arm = BBR
        elif total and n_c >= purity * total and n_c >= min_samples:
            arm = CUBIC
        out[(_text(pop), _text(prefix), int(ts))] = arm
        bbr_hosts[(_text(pop), _text(prefix), int(ts))] = int(hosts)
    return out, bbr_hosts


def _switches(arms: list[str]) -> int:
    return sum(a != b for a, b in itertools.pairwise(arms))


def _blocks(arms: list[str]) -> dict[str, int]:
    out = {BBR: 0, CUBIC: 0}
    for i, a in enumerate(arms):
        if i == 0 or arms[i - 1] != a:
            out[a] += 1
    return out


def _delete_topics(run_id: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": KAFKA_BROKERS})
    topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(f"dyncc-lab-{run_id}-")]
    if topics:
        for f in admin.delete_topics(topics, operation_timeout=10).values():
            try:
                f.result(15)
            except Exception as exc:  # teardown goes on
                log.warning("deleting a topic: %s", exc)


def test_trials_alternate_through_the_staged_rollout_over_kafka(clickhouse_db_url: str, tmp_path: Path) -> None:
    require_root()
    run_id = "h9" + secrets.token_hex(2)
    opts = LabOptions(
        round_seconds=ROUND_SECONDS, rounds=ROUNDS, run_id=run_id, kafka=KAFKA_BROKERS, layout=LAYOUT, scoring=SCORING,
        references=False,  # every prefix is the controller's (dyncc/lab/truth.py would take a lossy and a fine one)
    )  # fmt: skip
    store = open_lab_store(clickhouse_db_url)
    out = io.StringIO()
    lab = Lab(opts, store, make_control_factory(tmp_path), tmp_path, out=out)
    try:
        result = lab.run(StopFlag())
    finally:
        _delete_topics(run_id)
    assert result.leftover_namespaces == [] and not lab_namespaces(f"dlab-{run_id}")
    assert len(result.rounds) >= ROUNDS - 3, out.getvalue()  # a slow round skips a bucket, not more
    cfg = SCORING.evidence_settings()
    bs = ROUND_SECONDS

    # the asked arms per bucket, from the stored rounds; the evidence's own reader agrees
    asked: dict[tuple[str, str, int], dict[int, str]] = defaultdict(dict)
    held: dict[tuple[str, str, int], set[int]] = defaultdict(set)
    for pop, prefix, since, at, _decision, algorithm, status in store.query_rows(ASKED_SQL):
        key = (_text(pop), _text(prefix), int(since))
        bucket = int(at) // bs * bs
        if _text(status) in COUNTS:
            asked[key].setdefault(bucket, CUBIC if _text(algorithm) == CUBIC else BBR)
        else:
            held[key].add(bucket)
    assert asked, out.getvalue()
    last_round = int(result.rounds[-1].round_time.timestamp())
    first_round = int(result.rounds[0].round_time.timestamp())
    reader = asked_arms(store, list(asked), first_round - bs, last_round + bs, bs)
    assert {k: v for k, v in reader.items() if v} == dict(asked)

    realized, bbr_hosts = _realized(store, cfg.purity, cfg.min_arm_samples)
    trials = stored_trials(store, dt.datetime.fromtimestamp(last_round + 1, dt.UTC))
    assert trials and {(t.pop, t.prefix, t.since) for t in trials} == set(asked), (trials, sorted(asked))
    evidence = Evidence.for_window(store, cfg, SampleRule(bs, ROLLUP_MIN_BYTES), trials, last_round)
    waves = [
        f"{(int(ns) // 10**9 - first_round) // bs + 1:>3} {_text(event)}: {_text(why)[:100]}"
        for ns, event, why in store.query_rows(WAVES_SQL)
    ]

    # the configs each round published (the lab's publisher signs them on the round's clock)
    pops = sorted({t.pop for t in trials})
    published: dict[tuple[str, int], list[tuple[int, str, set[str]]]] = defaultdict(list)
    created: dict[tuple[str, int], tuple[int, str]] = {}
    for pop in pops:
        for version, st, kind, _entries, _targets, _why, created_ns in rs.config_history(store, pop, limit=1000):
            if _text(st) != "published":
                continue
            config = rs.load_published_config(store, pop, int(version))
            names = {e.prefix for e in config.entries if e.algorithm == BBR} if config is not None else set()
            published[(pop, int(created_ns) // 10**9 // bs * bs)].append((int(version), _text(kind), names))
            created[(pop, int(version))] = (int(created_ns), _text(kind))
    delays: dict[str, list[float]] = defaultdict(list)  # config kind -> seconds from its round to in force
    for pop, _host, version, reported in store.query_rows(APPLIED_SQL):
        c = created.get((_text(pop), int(version)))
        if c is not None:
            delays[c[1]].append((int(reported) - c[0]) / 1e9)

    report: list[str] = []
    problems: list[str] = []
    waited: list[str] = []  # rounds of a trial held after its first BBR bucket (a wave in flight)
    late: list[str] = []
    first_cubic = 0
    switch_counts: list[int] = []
    runs: list[int] = []  # runs of one arm in an ended trial's counted buckets
    for t in sorted(trials, key=lambda t: (t.pop, t.prefix, t.since)):
        key = (t.pop, t.prefix, t.since)
        ask = asked[key]
        end = t.end if t.outcome != RUNNING else last_round + bs
        start = t.since // bs * bs
        buckets = sorted(b for b in set(ask) | held[key] if start <= b < end)
        real = [realized.get((t.pop, t.prefix, b), "none") for b in buckets]
        wanted = [ask.get(b, "held") for b in buckets]
        counted = [r for r, w in zip(real, wanted, strict=True) if r == w]
        line = (
            f"{t.prefix:<24} {t.outcome:<7} r{(t.since - first_round) // bs + 1:<3} asked "
            f"{''.join(w[0].upper() if w != 'held' else '-' for w in wanted):<14} realized "
            f"{''.join(r[0] for r in real):<14} counted {''.join(c[0] for c in counted):<10} {t.reason[:90]}"
        )
        report.append(line)
        # the first bucket realized on BBR on every host of the POP: the prefix's canary passed and
        # was promoted (a bucket in which only the canary host had samples is realized BBR too)
        first_bbr = next(
            (
                b
                for b, r in zip(buckets, real, strict=True)
                if r == BBR and bbr_hosts.get((t.pop, t.prefix, b), 0) >= LAYOUT.hosts_per_pop
            ),
            None,
        )
        if first_bbr is not None:
            # every ask after it is realized in the bucket right after its round: no wave wait
            previous = BBR
            for b, r, w in zip(buckets, real, wanted, strict=True):
                if b <= first_bbr:
                    continue
                at = f"{t.prefix} r{(b - first_round) // bs + 1}"
                if w == "held":
                    waited.append(f"{at}: held")
                    continue
                if w != previous:  # a toggle: one config of its round has it, POP-wide
                    full = [(v, k) for v, k, names in published[(t.pop, b)] if (t.prefix in names) == (w == BBR)]
                    if not any(k == "full" for _v, k in full):
                        problems.append(f"{at}: toggle to {w} not published POP-wide: {published[(t.pop, b)]}")
                previous = w
                if r == "none" and b >= last_round:  # the bucket after the last round: not measured
                    continue
                if r != w:
                    late.append(f"{at}: asked {w}, realized {r}")
        real_arms = [r for r in real if r in (BBR, CUBIC)]
        if real_arms:
            first_cubic += real_arms[0] == CUBIC
        if t.outcome == RUNNING:
            continue
        switch_counts.append(_switches(counted))
        runs.append(sum(_blocks(counted).values()))
        # the effect the decision used counted exactly these buckets
        eff = evidence.delivery.get(key)
        if eff is not None and eff.ok and (eff.n_a, eff.n_b) != (counted.count(BBR), counted.count(CUBIC)):
            problems.append(f"{t.prefix}: the effect counted {eff.n_a} bbr / {eff.n_b} cubic buckets")
        # an ended trial rests on alternating realized blocks (a block: trial_block_rounds buckets)
        per_arm = {a: counted.count(a) // cfg.trial_block_rounds for a in (BBR, CUBIC)}
        if min(per_arm.values()) < 2 or _switches(counted) < 2:
            problems.append(f"{t.prefix}: ended on {per_arm} blocks, {_switches(counted)} switches")
    ended = [t for t in trials if t.outcome != RUNNING]
    summary = (
        f"{len(trials)} trials ({len(ended)} ended); first realized bucket cubic in {first_cubic}; switches of the "
        f"ended trials' counted buckets: median {statistics.median(switch_counts) if switch_counts else 'n/a'}, "
        f"range {min(switch_counts, default=0)}-{max(switch_counts, default=0)}; runs of one arm in them: "
        f"{sorted(runs)}"
    )
    summary += "; in force after the round (s, median / max): " + ", ".join(
        f"{k} {statistics.median(v):.1f} / {max(v):.1f}" for k, v in sorted(delays.items())
    )
    summary += f"; after the first BBR bucket: {len(waited)} trial rounds held, {len(late)} asks not realized"
    text = "\n".join(["trial arms (B/C asked, - held; b/c/m realized bbr, cubic, mixed; n: no samples):", *report,
                      summary, *waited, *late, "rollout (round event):", *waves])  # fmt: skip
    print(text)
    assert ended, text
    assert not problems, "\n".join(problems) + "\n" + text
    assert not waited, text
    if late:  # known: a config is in force 1.5-5 s into the 8 s bucket after its round (docstring)
        pytest.xfail(f"issue 34 item 0: {len(late)} asks after the first BBR bucket not realized in the bucket "
                     f"after their round (in force late in an 8 s bucket)\n{text}")  # fmt: skip
