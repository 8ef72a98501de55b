"""The plan of an incremental state update (controller/scoring/state_plan.py): pure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from controller.scoring.state_plan import Committed, plan_update

keys = st.sets(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 40), st.integers(1, 3)), max_size=60)


@given(current=keys, held=keys, generations=st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(1, 9)))
def test_the_plan_turns_the_committed_keys_into_the_current_ones(
    current: set[tuple[str, int, int]], held: set[tuple[str, int, int]], generations: dict[str, int]
) -> None:
    committed = {
        pop: Committed(g, {(b, v): float(b) for p, b, v in held if p == pop}) for pop, g in generations.items()
    }
    plan = plan_update(current, committed)
    want: dict[str, set[tuple[int, int]]] = {}
    for pop, b, v in current:
        want.setdefault(pop, set()).add((b, v))
    assert [p.pop for p in plan.pops] == sorted(want)  # POPs without current keys: nothing planned
    for p in plan.pops:
        start = set(committed[p.pop].thresholds) if p.base else set()
        if p.base:
            assert p.base == committed[p.pop].generation
        if p.reuse:
            assert start == want[p.pop] and not p.added and not p.removed
            continue
        removed = {(b, v) for b, v, _ in p.removed}
        assert removed <= start and not set(p.added) & start
        assert (start - removed) | set(p.added) == want[p.pop]
        assert all(t == float(b) for b, _, t in p.removed)  # the recorded threshold goes with it
        assert p.changes <= len(want[p.pop]) or p.base == 0  # never more work than building anew


def test_a_new_bucket_adds_one_key_and_the_oldest_leaves() -> None:
    held = {(b, 1): 0.5 for b in range(0, 36)}
    current = [("pop", b, 1) for b in range(1, 37)]
    (plan,) = plan_update(current, {"pop": Committed(7, held)}).pops
    assert (plan.base, plan.added, plan.removed) == (7, ((36, 1),), ((0, 1, 0.5),))


def test_late_data_replaces_a_version() -> None:
    held = {(b, 1): 0.5 for b in range(3)}
    (plan,) = plan_update([("pop", 0, 1), ("pop", 1, 2), ("pop", 2, 1)], {"pop": Committed(7, held)}).pops
    assert plan.added == ((1, 2),) and plan.removed == ((1, 1, 0.5),)


def test_without_a_committed_state_or_with_too_much_changed_it_builds_anew() -> None:
    (plan,) = plan_update([("pop", 5, 1)], {}).pops
    assert plan.base == 0 and plan.added == ((5, 1),)
    held = {(b, 1): 0.5 for b in range(10)}
    (plan,) = plan_update([("pop", b, 1) for b in range(20, 24)], {"pop": Committed(7, held)}).pops
    assert plan.base == 0 and plan.added == tuple((b, 1) for b in range(20, 24)) and not plan.removed


def test_nothing_changed_reuses_the_generation() -> None:
    held = {(b, 1): 0.5 for b in range(3)}
    plan = plan_update([("pop", b, 1) for b in range(3)], {"pop": Committed(7, held)})
    assert plan.pops[0].reuse and plan.building == ()
