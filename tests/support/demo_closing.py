"""A synthetic demo run that ends the way `dyncc demo` ends (dyncc/lab/demo.py `finish`).

`python -m tests.support.demo_closing WORKDIR` fills the demo's embedded store
(`chdb://WORKDIR/chdb?database=dyncc_demo`, the replay's URL) with the effect model's synthetic
trials (tests/support/report_synth.py `insert_trials`: two POPs, trials kept, reverted, running and
expired, a holdout each) and one canary rollback (a rollout_waves row, as the rollout engine writes
it), builds the run record from the stored decisions, logs a few teardown lines and calls
`finish()`: the report is written, then the closing lines are printed.  A subprocess, because
chDB opens one directory per process (the test process has its own); the test then opens the
printed store URL with `dyncc control explain`, `dyncc report` and the printed SQL.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter, defaultdict
from pathlib import Path

from controller.rollout.records import save_state
from controller.rollout.state import IDLE, RolloutState
from dyncc.lab import demo
from dyncc.lab.model import ControlOutcome, PrefixScore
from dyncc.lab.outcomes import RoundView
from dyncc.lab.run import RunRecord, open_lab_store, summarize_run
from dyncc.lab.topology import write_asn_file
from dyncc_common.runtime import setup_logging
from tests.support import report_synth as synth

DATABASE = "dyncc_demo"
CLASS_OF_KIND = {"kept": "lossy", "reverted": "deep", "running": "lossy", "expired": "lossy"}
ROLLBACK_POP = "lax"
ROLLBACK_ROUND = 11  # 1-based: the round whose end the rollback row carries
ROLLBACK_REASON = "canary wave v3 regressed: p10 delivery rate -62% on lax-e0 (allowed -15%)"


def hosts_of(pop: str) -> list[str]:
    return [f"{pop}-e0", f"{pop}-e1"]  # the first is the canary


def build(workdir: Path) -> int:
    url = f"chdb://{workdir / 'chdb'}?database={DATABASE}"
    store = open_lab_store(url)
    trials = synth.insert_trials(store)
    classes = {prefix: CLASS_OF_KIND[kind] for (_, prefix), kind in trials.kind.items()}
    classes.update({prefix: "fine" for prefix in trials.holdout.values()})
    pops = {prefix: pop for (pop, prefix) in trials.kind} | {p: pop for pop, p in trials.holdout.items()}
    hosts = {pop: hosts_of(pop) for pop in synth.POPS}

    by_round: dict[int, dict[str, PrefixScore]] = defaultdict(dict)
    rows = store.query_rows(
        "SELECT toUnixTimestamp(round_time), pop, prefix, decision, reason, algorithm FROM selections "
        "ORDER BY round_time, pop, prefix"
    )
    for end_s, pop, prefix, decision, reason, algorithm in rows:
        by_round[int(end_s)][str(prefix)] = PrefixScore(
            str(pop), 5, 0.8, 0.1, 40.0, str(decision), str(reason), str(algorithm)
        )
    rounds = []
    for k, end_s in enumerate(sorted(by_round)):
        scores = by_round[end_s]
        routes = {
            host: {p: "bbr" for p, s in scores.items() if s.algorithm == "bbr" and s.pop == pop}
            for pop, pop_hosts in hosts.items()
            for host in pop_hosts
        }
        rounds.append(RoundView(k + 1, end_s, ControlOutcome(scores, routes, "")))
    new_sockets = [{p: Counter({"cubic": 2}) for p in classes} for _ in rounds]
    record = RunRecord(classes, pops, hosts, rounds, new_sockets, synth.TRIAL_ROUND_S)

    at_ns = rounds[ROLLBACK_ROUND - 1].end_s * 10**9
    save_state(
        store,
        RolloutState(
            pop=ROLLBACK_POP,
            phase=IDLE,
            event="rollback",
            rollout_id="r-synthetic",
            stable_version=4,
            candidate_version=3,
            wave_version=4,
            wave_started_ns=at_ns,
            reason=ROLLBACK_REASON,
            updated_ns=at_ns,
        ),
    )
    headline = f"synthetic demo run: {len(rounds)} rounds of {synth.TRIAL_ROUND_S} s, {len(classes)} prefixes"
    summary = summarize_run(record, headline, store)
    asn = workdir / "lab-asn.csv"
    write_asn_file(asn, sorted(classes.items()))
    log = logging.getLogger("dyncc.lab")
    for i in range(3):  # what the live lab logs while it tears down, before the report is written
        log.info("teardown %d: namespaces of the synthetic run removed", i)
    return demo.finish(summary, store, url, workdir / "dyncc-demo-report.html", asn)


def main(argv: list[str]) -> int:
    setup_logging()
    return build(Path(argv[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
