"""controller/evidence/sequential.py: the normal-mixture confidence sequence holds at every look
(a Gaussian random walk looked at 200 times), a fixed interval looked at as often does not, and
the half-width against a hand computation."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from controller.evidence.sequential import fixed_radius, mixture_radius, mixture_z


def ever_excludes(radius, paths: int = 4000, looks: int = 200, seed: int = 1) -> float:
    """Share of null paths (mean of n N(0, 1) pair differences) whose interval leaves 0 at some look."""
    rng = np.random.default_rng(seed)
    n = np.arange(1, looks + 1)
    means = np.cumsum(rng.normal(0, 1, (paths, looks)), axis=1) / n
    se = 1 / np.sqrt(n)
    half = np.array([radius(float(s)) for s in se])
    return float((np.abs(means) > half).any(axis=1).mean())


def test_the_sequence_holds_at_every_look() -> None:
    rate = ever_excludes(lambda se: mixture_radius(se, 0.2, 0.1))
    assert rate <= 0.1 + 3 * math.sqrt(0.1 * 0.9 / 4000)


def test_a_fixed_interval_looked_at_every_round_does_not() -> None:
    rate = ever_excludes(lambda se: fixed_radius(se, 0.9))
    assert rate > 0.4  # 200 looks at a 90 % interval


def test_the_half_width_by_hand() -> None:
    se, tau, alpha = 0.1, 0.2, 0.1
    r = (tau / se) ** 2
    want = se * math.sqrt((1 + 1 / r) * (math.log(1 + r) + 2 * math.log(1 / alpha)))
    assert math.isclose(mixture_radius(se, tau, alpha), want)
    assert math.isclose(want / se, 2.7872, abs_tol=1e-3)  # against 1.64 for one look
    assert mixture_z(0.0, tau, alpha) == math.inf and mixture_z(math.nan, tau, alpha) == math.inf
    assert math.isclose(fixed_radius(1.0, 0.9), 1.6449, abs_tol=1e-4)


@given(st.floats(1e-4, 5.0), st.floats(0.01, 2.0), st.sampled_from([0.01, 0.05, 0.1, 0.2]))
def test_the_sequence_is_wider_than_one_look(se: float, tau: float, alpha: float) -> None:
    assert mixture_radius(se, tau, alpha) >= fixed_radius(se, 1 - alpha)
