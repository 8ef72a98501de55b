"""`dyncc control` hardening on real ClickHouse 18.16 and chDB, configs published to --publish-dir.

- A rejected or failed round never becomes controller state: the next round starts from what
  was published, and `selections` + `round_outcomes` say per prefix what shipped.
- Re-running a round at the same --at doubles nothing.
- A prefix validation would refuse (deny list, ...) is dropped with its reason before the
  config is built, so the POP's other prefixes ship.
- Every control option is checked at start (exit 2, one line); a round whose publish fails
  exits non-zero.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.control import cli as control_cli
from controller.control import loop as control_loop
from controller.control.settings import ControlSettings, cap_conflicts
from controller.report.data import compose
from controller.rollout.generate import build_config
from controller.rollout.records import load_published_config
from controller.rollout.validate import ValidationPolicy, prefix_problem, validate
from controller.scoring.decide import decide, empty_state
from controller.scoring.settings import ScoringSettings
from controller.scoring.state import load_previous
from controller.store import Store, open_store
from controller.store.migrate import apply_migrations
from controller.store.sql import migrations
from dyncc.cli import main as dyncc_main
from schemas.congestion_pb2 import CongestionConfig, PrefixEntry
from tests.support import scoring_synth as synth
from tests.support.rollout_util import make_keys, rollout_settings
from tests.support.view_data import view_query

POP = "lax"
START = int(dt.datetime(2024, 3, 1, 9, 0, tzinfo=dt.UTC).timestamp())
T0 = dt.datetime(2024, 3, 1, 12, 0, 30, tzinfo=dt.UTC)
ON_BBR = ("select", "keep")


def at(minutes: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def iso(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def insert(store: Store, bad: list[str], normal: int) -> None:
    patterns = {f"198.18.{i}.0/24": synth.NORMAL for i in range(normal)}
    patterns |= {p: synth.STEADY_BAD for p in bad}
    synth.insert_samples(store, synth.samples_frame(POP, patterns, START, 48))


# The round's bookkeeping (outcomes, state, kill switch, holds) is what these tests check, with
# selected prefixes going straight to BBR and staying there: trials and the watch's holdback off
# (tests/controller/evidence and tests/controller/scoring/test_decide_trials.py have them).
NO_TRIALS = ("--trial-blocks", "0", "--holdback", "0")


def control(url: str, when: dt.datetime, *options: str) -> int:
    return dyncc_main(["control", "--clickhouse", url, "--once", "--at", iso(when), *NO_TRIALS, *options])


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dyncc control")
    control_cli.configure(parser)
    return parser.parse_args([*argv, *NO_TRIALS])


def round_ids(store: Store) -> list[tuple[str, str]]:
    """(round_id, outcome) of every round of the POP, in round order."""
    rows = store.query_rows(
        "SELECT round_id, min(round_time_ns) AS t, max(recorded_ns) AS r, argMax(status, recorded_ns) "
        "FROM round_outcomes WHERE pop = %(pop)s GROUP BY round_id ORDER BY t, r",
        {"pop": POP},
    )
    return [(text(r[0]), text(r[3])) for r in rows]


def decisions(store: Store, round_id: str) -> dict[str, str]:
    rows = store.query_rows(
        "SELECT prefix, decision FROM selections WHERE round_id = %(r)s AND pop = %(pop)s", {"r": round_id, "pop": POP}
    )
    return {text(p): text(d) for p, d in rows}


def on_bbr(store: Store, round_id: str) -> set[str]:
    return {p for p, d in decisions(store, round_id).items() if d in ON_BBR}


def config_statuses(store: Store) -> list[tuple[int, str]]:
    rows = store.query_rows(
        "SELECT version, status FROM config_versions WHERE pop = %(pop)s ORDER BY created_ns", {"pop": POP}
    )
    return [(int(v), text(s)) for v, s in rows]


def published_file(directory: Path) -> CongestionConfig:
    return CongestionConfig.FromString((directory / f"{POP}.cfg").read_bytes())


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    return make_keys(tmp_path)[0]


def test_rejected_round_never_becomes_state(store: Store, store_url: str, keys: Path, tmp_path: Path) -> None:
    """The freeze case: a round with lifted caps is rejected; the next normal round must start
    from what was published (10 prefixes), not from the rejected 27, and publish."""
    bad = [f"198.19.{i}.0/24" for i in range(30)]
    insert(store, bad, normal=170)
    out = tmp_path / "cfg"
    # validation: at most 10 changes from a POP of <= 20 prefixes, and the scoring caps agree
    options = ["--publish-dir", str(out), "--key", str(keys), "--change-floor", "20", "--max-new", "10"]
    assert control(store_url, at(0), *options) == 0
    assert len(published_file(out).entries) == 10

    # caps lifted by mistake (what `--max-new 1000` did before start-up checks refused it)
    settings = ControlSettings.from_sources(vars(parse(["--clickhouse", store_url, "--once", *options])))
    controller = control_loop.Controller(store, settings, control_loop.Metrics())
    controller.cfg = replace(settings.scoring, max_new_per_round=1000, max_per_pop=1000)  # past the start checks
    rejected = controller.round(at(5))
    assert rejected is not None

    # normal caps again: starts from the 10 published prefixes, adds 10, publishes
    assert control(store_url, at(10), *options) == 0
    assert config_statuses(store) == [(1, "published"), (2, "rejected"), (2, "published")]
    assert rejected.outcomes[POP].status == "rejected" and "change_too_large" in rejected.outcomes[POP].reason
    assert "configs: 1 rejected" in control_loop.round_line(rejected, False)
    (r1, s1), (r2, s2), (r3, s3) = round_ids(store)
    assert (s1, s2, s3) == ("published", "rejected", "published")
    assert r2 == rejected.round_id
    d3 = decisions(store, r3)
    assert sum(d == "keep" for d in d3.values()) == 10 and sum(d == "select" for d in d3.values()) == 10
    assert {p for p, d in d3.items() if d == "keep"} == on_bbr(store, r1)
    assert len(on_bbr(store, r2)) > 20  # what the rejected round decided ...
    shipped = {e.prefix for e in published_file(out).entries}
    assert published_file(out).version == 2 and shipped == on_bbr(store, r3)  # ... and what shipped
    v1 = load_published_config(store, POP, 1)
    assert v1 is not None and {e.prefix for e in v1.entries} == on_bbr(store, r1)

    # per prefix: the decision and whether it was published (the selections_with_outcome view)
    view = store.query_df(view_query("selections_with_outcome", at(-1), at(20)))
    view = view[view["decision"].isin(ON_BBR)]
    by_outcome = view.groupby("outcome")["prefix"].apply(lambda s: set(map(text, s))).to_dict()
    assert sorted(map(str, by_outcome)) == ["published", "rejected"]
    assert by_outcome["rejected"] == on_bbr(store, r2)

    # reports count only what was published: the rejected round's extra prefixes are not treated
    groups = store.query_df(compose("report_treatment_groups"), {"pop": "", "end": at(60)})
    treated = {text(p) for p, g in zip(groups["prefix"], groups["grp"], strict=True) if text(g) == "treated"}
    only_rejected = on_bbr(store, r2) - on_bbr(store, r3)
    assert only_rejected and treated == on_bbr(store, r3)
    per_round = store.query_df(
        compose("report_selections_per_round"), {"pop": "", "start": at(-1), "end": at(60)}
    ).sort_values("ts")
    assert per_round["on_bbr"].astype(int).tolist() == [10, 20]
    assert per_round["new_selected"].astype(int).tolist() == [10, 10]


def test_rerun_at_same_time_does_not_duplicate_state(store: Store, store_url: str, keys: Path, tmp_path: Path) -> None:
    insert(store, ["198.19.1.0/24", "198.19.2.0/24", "198.19.3.0/24"], normal=20)
    options = ["--publish-dir", str(tmp_path / "cfg"), "--key", str(keys), "--holdout", "0"]
    for _ in range(3):
        assert control(store_url, at(0), *options) == 0
    assert config_statuses(store) == [(1, "published")]  # no `duplicate:` rejection
    assert [s for _, s in round_ids(store)] == ["published", "unchanged", "unchanged"]
    state = load_previous(store, POP, at(0), include_recorded=False)
    assert not state.duplicated(["pop", "prefix"]).any() and len(state) == 23
    assert sorted(state[state["decision"].isin(ON_BBR)]["prefix"]) == [
        "198.19.1.0/24",
        "198.19.2.0/24",
        "198.19.3.0/24",
    ]
    per_round = store.query_df(compose("report_selections_per_round"), {"pop": "", "start": at(-1), "end": at(5)})
    assert per_round["on_bbr"].astype(int).tolist() == [3]  # the re-runs count once


def test_denied_prefix_is_skipped_and_the_others_ship(store: Store, store_url: str, keys: Path, tmp_path: Path) -> None:
    denied, good = "198.19.7.0/24", ["198.19.1.0/24", "198.19.2.0/24"]
    insert(store, [denied, *good], normal=20)
    out = tmp_path / "cfg"
    options = ["--publish-dir", str(out), "--key", str(keys), "--holdout", "0", "--deny", "198.19.7.128/25"]
    for minutes in (0, 5):  # every round: the denied prefix keeps scoring poor
        assert control(store_url, at(minutes), *options) == 0
    assert [s for _, s in config_statuses(store)] == ["published"]  # never rejected
    assert sorted(e.prefix for e in published_file(out).entries) == good
    for round_id, outcome in round_ids(store):
        assert outcome in ("published", "unchanged")
        row = store.query_rows(
            "SELECT decision, reason FROM selections WHERE round_id = %(r)s AND prefix = %(p)s",
            {"r": round_id, "p": denied},
        )
        assert [(text(d), text(r)) for d, r in row] == [
            ("skip", f"denied: {denied} overlaps denied range 198.19.7.128/25")
        ]


def test_failed_publish_exits_non_zero_and_is_not_state(
    store: Store, store_url: str, keys: Path, tmp_path: Path
) -> None:
    insert(store, ["198.19.1.0/24"], normal=20)
    out = tmp_path / "cfg"
    (out / f"{POP}.cfg").mkdir(parents=True)  # the directory is writable, the config file cannot be replaced
    options = ["--publish-dir", str(out), "--key", str(keys), "--holdout", "0"]
    assert control(store_url, at(0), *options) == 1
    assert config_statuses(store) == [(1, "publish_failed")]
    (failed, outcome), *_ = round_ids(store)
    assert outcome == "publish_failed" and decisions(store, failed)["198.19.1.0/24"] == "select"

    (out / f"{POP}.cfg").rmdir()
    assert control(store_url, at(5), *options) == 0
    (_, _), (second, outcome) = round_ids(store)
    # the failed round was not state: the prefix is selected again (not "kept") and now ships
    assert outcome == "published" and decisions(store, second)["198.19.1.0/24"] == "select"
    assert [e.prefix for e in published_file(out).entries] == ["198.19.1.0/24"]


def test_killed_pop_rounds_hold_nothing_on_bbr(store: Store, store_url: str, keys: Path, tmp_path: Path) -> None:
    insert(store, ["198.19.1.0/24"], normal=20)
    publish = ["--publish-dir", str(tmp_path / "cfg"), "--key", str(keys)]
    options = [*publish, "--holdout", "0"]
    assert control(store_url, at(0), *options) == 0
    kill = ["control", *publish, "kill-switch", "--pop", POP, "--clickhouse", store_url]
    assert dyncc_main(kill) == 0
    assert control(store_url, at(5), *options) == 0
    assert dyncc_main([*kill, "--release"]) == 0
    assert control(store_url, at(10), *options) == 0
    (_, s1), (_, s2), (r3, s3) = round_ids(store)
    assert (s1, s2, s3) == ("published", "killed", "published")
    # after the kill nothing was on BBR: the prefix is selected anew and rolled out from empty
    assert decisions(store, r3)["198.19.1.0/24"] == "select"


def test_rounds_during_a_canary_are_held(store: Store, store_url: str, keys: Path, tmp_path: Path) -> None:
    insert(store, ["198.19.1.0/24", "198.19.2.0/24"], normal=20)
    out = tmp_path / "cfg"
    options = ["--publish-dir", str(out), "--key", str(keys), "--holdout", "0", "--staging", "on"]
    options += ["--hosts", "lax:edge-1,edge-2"]
    assert control(store_url, at(0), *options) == 0
    assert control(store_url, at(5), *options) == 0  # waiting for the canary: not a failure
    (r1, s1), (r2, s2) = round_ids(store)
    assert (s1, s2) == ("published", "held")
    canary = CongestionConfig.FromString((out / f"{POP}.canary.cfg").read_bytes())
    assert {e.prefix for e in canary.entries} == on_bbr(store, r1) == on_bbr(store, r2)
    assert not (out / f"{POP}.cfg").exists()


def test_bad_key_or_publish_dir_exit_2_before_the_round(
    store: Store, store_url: str, keys: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    insert(store, ["198.19.1.0/24"], normal=20)
    garbage = tmp_path / "garbage.key"
    garbage.write_text("not a key\n")
    blocker = tmp_path / "file"
    blocker.write_text("")
    cases = [
        (["--publish-dir", str(tmp_path / "cfg"), "--key", str(tmp_path / "missing.key")], "not found"),
        (["--publish-dir", str(tmp_path / "cfg"), "--key", str(garbage)], "cannot load private key"),
        (["--publish-dir", str(blocker / "cfg"), "--key", str(keys)], "--publish-dir"),
        (["--publish-dir", str(tmp_path / "cfg")], "--key PRIVATE_PEM is required"),
    ]
    for options, expected in cases:
        assert control(store_url, at(0), *options) == 2, options
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and expected in err and "Traceback" not in err, (options, err)
    assert store.query_rows("SELECT count() FROM selections")[0][0] == 0  # refused before the round


BAD_OPTIONS: list[tuple[list[str], str]] = [
    (["--deny", "not-a-cidr"], "bad deny range 'not-a-cidr'"),
    (["--deny", ""], "bad deny range ''"),
    (["--canary-fraction", "0"], "--canary-fraction 0.0 must be in (0, 1]"),
    (["--canary-fraction", "1.5"], "--canary-fraction 1.5 must be in (0, 1]"),
    (["--canary-fraction", "nan"], "--canary-fraction nan"),
    (["--hosts", "edge-1"], "bad --hosts entry 'edge-1'"),
    (["--canary-hosts", "lax:"], "bad --canary-hosts entry"),
    (["--max-change-fraction", "0"], "--max-change-fraction 0.0 must be in (0, 1]"),
    (["--max-change-fraction", "1.5"], "--max-change-fraction 1.5"),
    (["--max-per-pop=-1"], "--max-per-pop -1 must be at least 1"),
    (["--allowed-algorithms", ""], "--allowed-algorithms is empty"),
    (["--allowed-algorithms", " , "], "--allowed-algorithms is empty"),
    (["--change-floor", "-1"], "--change-floor -1"),
    (["--v4-length", "32"], "--v4-length must be 1..31"),
    (["--max-load", "0"], "--max-load 0.0 must be above 0"),
    (["--max-p10-regression", "2"], "--max-p10-regression 2.0"),
    (["--min-samples", "0"], "--min-samples 0 must be at least 1"),
    (["--soak", "soon"], "soon"),
    (["--min-mem-available", "lots"], "bad --min-mem-available 'lots'"),
    (["--inventory", "/nonexistent/inventory.toml"], "cannot read inventory"),
    (["--expire", "never"], "never"),
    (["--every", "1s", "--delay", "2s"], "--every must be positive and longer than --delay"),
    (["--metrics-port", "70000"], "--metrics-port 70000"),
    # scoring caps that validation would refuse every round
    (["--max-new", "150"], "--max-new 150 is above the change limit 100"),
    (["--change-floor", "0"], "--max-new 100 is above the change limit 0"),
    (["--max-bbr-per-pop", "6000"], "--max-bbr-per-pop 6000 is above the validation cap --max-per-pop 5000"),
    (["--max-per-pop", "500"], "--max-bbr-per-pop 1000 is above the validation cap --max-per-pop 500"),
    (["--algorithm", "reno"], "--algorithm 'reno' is not in --allowed-algorithms bbr,cubic"),
    (["--allowed-algorithms", "cubic"], "--algorithm 'bbr' is not in --allowed-algorithms cubic"),
]


def test_every_bad_control_option_is_one_line_exit_2(
    chdb_url: str, keys: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checked at start, with and without publishing: exit 2, one stderr line, no traceback."""
    store = open_store(chdb_url)
    apply_migrations(store)
    publish = ["--publish-dir", str(tmp_path / "cfg"), "--key", str(keys)]
    for options, expected in BAD_OPTIONS:
        for extra in ([], publish, ["--dry-run"]):
            code = control(chdb_url, at(0), *extra, *options)
            err = capsys.readouterr().err
            lines = err.strip().splitlines()
            assert code == 2 and len(lines) == 1 and expected in lines[0], (options, extra, err)
            assert lines[0].startswith("dyncc control: ") and "Traceback" not in err
    assert store.query_rows("SELECT count() FROM selections")[0][0] == 0


def test_migration_backfills_outcomes_of_earlier_rounds(store_url: str) -> None:
    """Rounds recorded before round_outcomes existed: config status when a config was generated
    from the round, else legacy (in force, as before); re-applying adds nothing."""
    store = open_store(store_url)
    try:
        apply_migrations(store, [m for m in migrations() if m.version < 7])
        rounds = [("ra", at(0), "select"), ("rb", at(5), "select"), ("rc", at(10), "keep")]
        store.insert_columns(
            "selections",
            {
                "round_id": [r[0] for r in rounds],
                "round_time": np.array([np.datetime64(r[1].replace(tzinfo=None), "s") for r in rounds]),
                "round_time_ns": np.array([int(r[1].timestamp()) * 10**9 for r in rounds], dtype=np.uint64),
                "pop": [POP] * 3,
                "prefix": ["198.19.1.0/24"] * 3,
                "decision": [r[2] for r in rounds],
            },
        )
        store.insert_columns(
            "config_versions",
            {
                "created_ns": np.array([1, 2], dtype=np.uint64),
                "pop": [POP, POP],
                "version": np.array([1, 2], dtype=np.uint64),
                "round_id": ["ra", "rb"],
                "status": ["published", "rejected"],
                "kind": ["full", "candidate"],
            },
        )
        apply_migrations(store)
        apply_migrations(store)
        assert round_ids(store) == [("ra", "published"), ("rb", "rejected"), ("rc", "legacy")]
        assert store.query_rows("SELECT count() FROM round_outcomes")[0][0] == 3
        state = load_previous(store, POP, at(7), include_recorded=False)
        assert state["decision"].tolist() == ["select"]  # ra's row: rb was rejected, rc is later
    finally:
        store.close()


# -- pure parts ------------------------------------------------------------------------------------


def _scores(prefixes: list[str]) -> pd.DataFrame:
    n = len(prefixes)
    return pd.DataFrame(
        {
            "pop": [POP] * n,
            "prefix": prefixes,
            "family": [2] * n,
            "samples": [400] * n,
            "qualifying": [300] * n,
            "counted_buckets": [36] * n,
            "bad_buckets": [36] * n,
            "transitions": [0] * n,
            "duty_cycle": [1.0] * n,
            "flap_ratio": [0.0] * n,
            "median_delivery_rate": [1e6] * n,
            "low_delivery_rate": [5e5] * n,
            "median_min_rtt_ms": [40.0] * n,
            "low_rtt_buckets": [0] * n,
        }
    )


def test_decide_drops_refused_prefixes_and_reverts_them_when_on_bbr() -> None:
    cfg = ScoringSettings(holdout_fraction=0.0, max_new_per_round=1)
    policy = ValidationPolicy(deny=(ipaddress.ip_network("198.51.100.0/24"),))

    def refuse(prefix: str) -> str | None:
        problem = prefix_problem(prefix, policy)
        return None if problem is None else problem[1]

    now = int(at(0).timestamp())
    previous = pd.concat(
        [
            empty_state(),
            pd.DataFrame(
                {
                    "pop": [POP],
                    "prefix": ["198.51.100.0/24"],
                    "decision": ["keep"],
                    "selected_since": [now - 60],  # still inside the min hold: denial wins anyway
                    "holdout_since": [0],
                    "cooldown_until": [0],
                    "last_seen": [now - 60],
                    "baseline_low_rate": [5e5],
                }
            ),
        ]
    )
    scores = _scores(["192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "127.0.0.0/24"])
    out = decide(scores, previous, now, cfg, refuse=refuse).set_index("prefix")
    # the only slot (max_new 1) goes to a publishable prefix, never to a refused one
    assert out.loc["192.0.2.0/24", "decision"] == "select"
    assert out.loc["203.0.113.0/24", "decision"] == "skip" and str(out.loc["203.0.113.0/24", "reason"]).startswith(
        "capped"
    )
    assert out.loc["127.0.0.0/24", "decision"] == "skip"
    assert out.loc["127.0.0.0/24", "reason"] == "denied: 127.0.0.0/24 overlaps denied range 127.0.0.0/8"
    assert out.loc["198.51.100.0/24", "decision"] == "revert"
    assert out.loc["198.51.100.0/24", "reason"] == "denied: 198.51.100.0/24 overlaps denied range 198.51.100.0/24"
    assert out.loc["198.51.100.0/24", "cooldown_until"] == 0 and out.loc["198.51.100.0/24", "algorithm"] == "cubic"


_octet = st.integers(0, 255)
_prefix_text = st.one_of(
    st.builds(lambda a, b, c, d, n: f"{a}.{b}.{c}.{d}/{n}", _octet, _octet, _octet, _octet, st.integers(0, 33)),
    st.builds(lambda a, n: f"2001:db8:{a:x}::/{n}", st.integers(0, 0xFFFF), st.integers(0, 129)),
    st.text(max_size=20),
)


@settings(max_examples=300, deadline=None)
@given(_prefix_text)
def test_prefix_problem_is_the_rule_validation_applies(prefix: str) -> None:
    policy = ValidationPolicy(deny=(ipaddress.ip_network("198.51.100.0/24"),))
    config = build_config(POP, 2, [PrefixEntry(prefix=prefix, algorithm="bbr")], created_at_ns=1)
    reasons = validate(config, previous=None, last_version=1, available=None, policy=policy)
    problem = prefix_problem(prefix, policy)
    assert reasons == ([] if problem is None else [f"{problem[0]}: {problem[1]}"])


def test_cap_conflicts() -> None:
    policy = ValidationPolicy.from_settings(rollout_settings([]))
    assert cap_conflicts(policy, ScoringSettings()) == []
    assert cap_conflicts(policy, ScoringSettings(max_new_per_round=101)) == [
        "--max-new 101 is above the change limit 100 (--max-change-fraction 0.5 x --change-floor 200)"
    ]
