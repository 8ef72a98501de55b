"""The trial rule's error rates and the watch's reverts, measured in the closed loop of
tests/support/closed_loop.py (per-sample telemetry, canary waves, the real `decide` and the real
switchback estimator) at the default settings.  The bounds are set from the measurement of 10
seeds (docs/report.md, "Trial error rates at the defaults"); bench/closed_loop.py prints the
long table.  The null prefixes' bound is the rule's nominal one-sided error (1 - level) / 2 = 5 %
plus three binomial standard deviations of the trials run here."""

from __future__ import annotations

import math
from functools import cache

import pytest

from controller.evidence import switchback
from controller.evidence.sequential import fixed_radius
from tests.support import closed_loop as cl

SEEDS = (1, 2, 3, 4)


@cache
def records() -> list[cl.PrefixRecord]:
    return cl.run(cl.Conditions(), SEEDS)


def rows() -> dict[float, cl.TableRow]:
    return {r.effect: r for r in cl.table(records(), cl.Conditions().effects)}


def null_bound(n: int, p: float = 0.05) -> float:
    return p + 3 * math.sqrt(p * (1 - p) / n)


def test_a_null_prefix_is_rarely_kept() -> None:
    null = rows()[0.0]
    assert null.trials >= 60
    assert null.kept <= null_bound(null.trials), cl.format_table(list(rows().values()))
    assert null.reverted <= null_bound(null.trials)  # the other side of the sequence


def test_a_harmful_prefix_is_never_kept_and_soon_reverted() -> None:
    bad = rows()[-0.4]
    assert bad.kept == 0.0
    assert bad.reverted >= 0.95
    assert bad.mean_rounds <= 12


def test_real_wins_are_found() -> None:
    table = rows()
    assert table[0.6].kept >= 0.95, cl.format_table(list(table.values()))
    assert table[0.2].kept >= 0.45  # 61 % over 10 seeds; the rest still running after 48 rounds, not reverted
    assert table[0.2].reverted <= 0.02


def test_decisions_rest_on_alternating_realized_blocks() -> None:
    """Canary waves delay a prefix's first BBR bucket; the blocks the rule judged still alternate."""
    for row in rows().values():
        if not math.isnan(row.alternating):
            assert row.alternating >= 0.95, row


def test_the_interval_holds_the_truth() -> None:
    for row in rows().values():
        assert row.coverage >= 0.85, row


def test_looking_every_round_at_a_fixed_interval_would_keep_null_prefixes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound above can fail: the same loop with a fixed-sample interval (a test peeked at every
    round) keeps far more null prefixes than the confidence sequence does."""
    monkeypatch.setattr(switchback, "mixture_radius", lambda se, scale, alpha: fixed_radius(se, 1 - alpha))
    monkeypatch.setattr(switchback, "mixture_z", lambda se, scale, alpha: fixed_radius(se, 1 - alpha) / se)
    records = cl.run(cl.Conditions(effects=(0.0,), candidates=40), (7, 8))
    (null,) = cl.table(records, (0.0,))
    assert null.kept > null_bound(null.trials), null


@cache
def dropped() -> list[cl.PrefixRecord]:
    """+60 % prefixes whose effect becomes -40 % six rounds after their keep."""
    cond = cl.Conditions(effects=(0.6,), drop_to=-0.4, drop_after=6, rounds=40, candidates=30, controls=30)
    return cl.run(cond, (11, 12))


def test_a_kept_prefix_that_turns_bad_is_reverted_by_its_watch() -> None:
    kept = [r for r in dropped() if r.kept_round >= 0 and r.drop_round >= 0 and r.drop_round + 12 <= 40]
    assert len(kept) >= 30
    caught = [r for r in kept if 0 <= r.watch_revert_round - r.drop_round <= 12]
    assert len(caught) / len(kept) >= 0.75, (len(caught), len(kept))
    # never before the drop: the watch does not revert a prefix BBR still helps
    assert not [r for r in kept if 0 <= r.watch_revert_round < r.drop_round]


def test_a_watched_prefix_that_stays_good_stays() -> None:
    """No watch revert of a kept prefix whose effect did not change (+20 %, +60 %)."""
    kept = [r for r in records() if r.kept_round >= 0 and r.effect > 0]
    assert len(kept) >= 100
    reverted = [r for r in kept if r.watch_revert_round >= 0]
    assert len(reverted) <= 0.02 * len(kept), [(r.effect, r.kept_round, r.watch_revert_round) for r in reverted]
