"""decide() against an oracle written independently of it (tests/support/decide_oracle.py) on
random inputs with trials, the watch, pins, a lowered cap and the deny list on
(tests/support/decide_cases.py): the decisions, algorithms, state columns and reason kinds agree."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from controller.scoring.decide import decide
from tests.controller.scoring.test_decide_equal import NOW
from tests.support.decide_cases import Case, full_case
from tests.support.decide_oracle import KINDS, oracle

COLUMNS = ("pop", "prefix", "decision", "algorithm", "selected_since", "cooldown_until", "trial_since",
           "trial_ended", "new", "holdout", "last_seen")  # fmt: skip


def compare(c: Case) -> Counter[str]:
    got = decide(c.scores, c.state, NOW, c.cfg, **c.kwargs())
    want = oracle(c.scores, c.state, NOW, c.cfg, c.expire, c.refuse, c.evidence, c.trial_effects, c.pins,
                  c.watch_effects)  # fmt: skip
    rows = got.to_dict("records")
    assert [(r["pop"], r["prefix"]) for r in rows] == [(w["pop"], w["prefix"]) for w in want]
    seen: Counter[str] = Counter()
    for row, w in zip(rows, want, strict=True):
        mine = {k: (int(row[k]) if k in ("new", "holdout") else row[k]) for k in COLUMNS}
        assert mine == {k: (int(w[k]) if k in ("new", "holdout") else w[k]) for k in COLUMNS}, (row["reason"], w)
        kind, arg = w["kind"]
        assert KINDS[kind](row["reason"], arg), (kind, row["reason"])
        seen.update([row["decision"], kind, f"ended {row['trial_ended']}", f"algo {row['algorithm']}"])
    return seen


@pytest.mark.parametrize("block", range(10))
def test_decide_agrees_with_the_oracle(block: int) -> None:
    for seed in range(block * 30, block * 30 + 30):
        compare(full_case(seed))


def test_the_random_cases_reach_every_rule() -> None:
    seen: Counter[str] = Counter()
    for seed in range(60):
        seen += compare(full_case(seed))
    for what in ("select", "trial", "keep", "revert", "holdout", "skip", "pin", "over cap", "denied",
                 "deny beats pin", "ended keep", "ended revert", "algo cubic", "algo bbr"):  # fmt: skip
        assert seen[what] > 0, (what, seen)


def test_the_oracle_can_fail() -> None:
    """A changed rule shows: the oracle with no cap disagrees where decide's cap bites."""
    c = next(c for c in map(full_case, range(100)) if c.cfg.max_per_pop == 1)
    got = decide(c.scores, c.state, NOW, c.cfg, **c.kwargs())
    assert got["reason"].str.startswith("over cap").any()
    wider = dataclasses.replace(c.cfg, max_per_pop=1000)
    want = oracle(c.scores, c.state, NOW, wider, c.expire, c.refuse, c.evidence, c.trial_effects, c.pins,
                  c.watch_effects)  # fmt: skip
    assert [r["decision"] for r in got.to_dict("records")] != [w["decision"] for w in want]
