"""The decision words: what scoring decides per prefix, stored in `selections.decision`.

The one home of the words (controller/scoring/decide.py writes them; scoring, evidence, report,
control and the lab read them), pure and without numpy or pandas.  It sits in the store, below
every reader, as the publish-outcome words do (controller/store/outcomes.py); the SQL files spell
the same words.

A trial's outcome (`trial_ended`, the evidence's `Trial.outcome`) uses the same words: KEEP,
REVERT, or TRIAL while it is still running.
"""

from __future__ import annotations

SELECT = "select"  # moves to BBR this round (trials off)
TRIAL = "trial"  # a switchback trial goes on (its `algorithm` is the arm of this bucket)
KEEP = "keep"  # stays on BBR
REVERT = "revert"  # back to CUBIC
HOLDOUT = "holdout"  # a candidate kept on CUBIC as the control group
SKIP = "skip"  # stays on CUBIC
PIN = "pin"  # an operator's pin: on BBR when its `algorithm` is not cubic

#: every decision, in the order the lab's table shows them
DECISIONS: tuple[str, ...] = (SELECT, TRIAL, KEEP, HOLDOUT, REVERT, SKIP, PIN)
#: on BBR for good: a TRIAL row is on BBR only while its `algorithm` is bbr, a PIN while not cubic
ON_BBR_FOR_GOOD: tuple[str, ...] = (SELECT, KEEP)
#: on BBR or in a trial: a trial counts as selected from its first round (the lab's outcomes)
ON_BBR_INCLUDING_TRIALS: tuple[str, ...] = (SELECT, KEEP, TRIAL)
#: the start of the reason of a prefix reverted for --max-bbr-per-pop
OVER_CAP = "over cap"
