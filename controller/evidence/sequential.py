"""Anytime-valid intervals: the two-sided normal-mixture confidence sequence.  Pure math, no I/O.

An estimate d_hat of an effect d with standard error se (information I = 1 / se**2) that grows
as a Gaussian martingale (a sum of independent pair differences, controller/evidence/switchback.py)
has, for a N(0, tau**2) mixture over d (Robbins 1970; Howard, Ramdas, McAuliffe and Sekhon 2021,
"Time-uniform, nonparametric, nonasymptotic confidence sequences", the two-sided normal mixture;
the same statistic as the mSPRT of Johari, Pekelis and Walsh 2017), the confidence sequence

    |d_hat - d| <= se * sqrt((1 + 1 / (I tau**2)) * (ln(1 + I tau**2) + 2 ln(1 / alpha)))

which holds at every look at once with probability at least 1 - alpha (Ville's inequality): a
rule that stops the first time the sequence leaves zero keeps its error rate at alpha however
often it looks.  `tau` (the effect scale, log scale) sets where the sequence is tightest: at the
information where I tau**2 is about 5 to 10, i.e. for effects about the size of tau.  With a
variance estimated from the data (a plug-in) the guarantee is asymptotic (Waudby-Smith et al.
2021, "Time-uniform central limit theory"); the closed-loop simulation (tests/support/closed_loop.py)
measures the rates that result.
"""

from __future__ import annotations

import math
from statistics import NormalDist

__all__ = ["fixed_radius", "mixture_radius", "mixture_z"]


def mixture_z(se: float, tau: float, alpha: float) -> float:
    """The half-width of the confidence sequence in standard errors at this `se`."""
    if not (se > 0 and math.isfinite(se)):
        return math.inf
    r = (tau / se) ** 2  # I * tau**2
    return math.sqrt((1.0 + 1.0 / r) * (math.log1p(r) + 2.0 * math.log(1.0 / alpha)))


def mixture_radius(se: float, tau: float, alpha: float) -> float:
    """The half-width of the confidence sequence (log scale) at this `se`."""
    return se * mixture_z(se, tau, alpha)


def fixed_radius(se: float, level: float) -> float:
    """The half-width of a fixed-sample normal interval at `level` (for one look, not a sequence)."""
    if not (se >= 0 and math.isfinite(se)):
        return math.inf
    return se * NormalDist().inv_cdf(1 - (1 - level) / 2)
