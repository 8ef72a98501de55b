"""The effect model's SQL equals its pandas definition (controller/evidence/switchback.py) on the
same raw samples, on ClickHouse 18.16 and chDB: the POP's concurrent controls
(sql/queries/evidence_pop_controls.sql against `pop_controls`) and the per-bucket statistics
(evidence_arm_buckets.sql: every qualifying sample's ln mean and variance), and a bucket's
control does not depend on the window a caller reads."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np

from controller.evidence.load import arm_cells, pop_control_cells
from controller.evidence.switchback import CONTROL_SPAN, CONTROL_TRAIL, pop_controls
from controller.store import Store
from tests.support import report_synth as rs

MIN_SAMPLES = 3


def unix(t: dt.datetime) -> int:
    return int(t.replace(tzinfo=dt.UTC).timestamp())


def test_the_controls_sql_is_the_pandas_definition(store: Store) -> None:
    synth = rs.insert_trials(store)
    bs = rs.TRIAL_ROUND_S
    keys = [(pop, x) for pop in rs.POPS for x in [*synth.prefixes[pop], synth.holdout[pop]]]
    t0, end = unix(rs.T0), unix(synth.end)
    cells = arm_cells(store, keys, t0, end, bs, rs_min_bytes())
    assert len(cells) and np.isfinite(cells["mean_log"]).all()
    cubic = cells[cells["arm"] == "cubic"]
    start = t0 + (CONTROL_SPAN + 2) * bs
    want = pop_controls(cubic, MIN_SAMPLES, bs, start)
    got = pop_control_cells(store, rs.POPS, start, end, bs, rs_min_bytes(), MIN_SAMPLES)
    assert set(got) == set(rs.POPS) == set(want)
    for pop in rs.POPS:
        assert got[pop].keys() == want[pop].keys()
        assert len(got[pop]) >= 10
        for ts, value in want[pop].items():
            assert math.isclose(got[pop][ts], value, abs_tol=1e-9), (pop, ts)
    # a later, shorter read gives the same control for the buckets both hold (causal reference)
    later = pop_control_cells(store, rs.POPS, start + 5 * bs, end - 2 * bs, bs, rs_min_bytes(), MIN_SAMPLES)
    for pop in rs.POPS:
        for ts, value in later[pop].items():
            assert math.isclose(got[pop][ts], value, abs_tol=1e-9)
    assert CONTROL_TRAIL < CONTROL_SPAN


def test_the_bucket_statistics_count_every_qualifying_sample(store: Store) -> None:
    synth = rs.insert_trials(store)
    bs = rs.TRIAL_ROUND_S
    pop = rs.POPS[0]
    keys = [(pop, x) for x in synth.prefixes[pop]]
    cells = arm_cells(store, keys, unix(rs.T0), unix(synth.end), bs, rs_min_bytes())
    # every 5 s one poll per trial prefix: a bucket's samples (app-limited left out: every 6th)
    per = cells.groupby(["prefix", "ts"])["samples"].sum()
    polls = bs // rs.TRIAL_POLL_S
    assert per.max() <= polls and per.median() >= polls - 2
    # 10 % lognormal noise per poll: the within-bucket sd of ln(rate) is about 0.1
    sd = np.sqrt(cells.loc[cells["samples"] >= 4, "var_log"])
    assert 0.05 < float(np.median(sd)) < 0.2


def rs_min_bytes() -> int:
    from controller.report.data import MIN_BYTES

    return MIN_BYTES
