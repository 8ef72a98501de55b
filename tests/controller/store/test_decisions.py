"""The decision words (controller/store/decisions.py): one spelling, two named sets of 'on BBR'."""

from __future__ import annotations

from pathlib import Path

from controller.store import decisions as d


def test_the_words_are_distinct_and_the_sets_named_by_what_they_hold() -> None:
    assert len(set(d.DECISIONS)) == len(d.DECISIONS) == 7
    assert d.ON_BBR_FOR_GOOD == (d.SELECT, d.KEEP)
    assert (*d.ON_BBR_FOR_GOOD, d.TRIAL) == d.ON_BBR_INCLUDING_TRIALS
    assert set(d.ON_BBR_INCLUDING_TRIALS) <= set(d.DECISIONS)


def test_the_readers_use_the_one_spelling() -> None:
    from controller.evidence import settings, summary, trial
    from controller.report import trials
    from controller.scoring import decide
    from dyncc.lab import outcomes, table

    assert decide.ON_BBR is d.ON_BBR_FOR_GOOD and summary.RUNNING is d.TRIAL
    assert (trial.KEEP, trial.REVERT) == (d.KEEP, d.REVERT) and set(settings.AT_LIMIT) == {d.KEEP, d.REVERT}
    assert set(trials.OUTCOME) == {d.KEEP, d.REVERT, d.TRIAL}
    assert outcomes.ON_BBR_INCLUDING_TRIALS is d.ON_BBR_INCLUDING_TRIALS
    assert tuple(w for w in d.DECISIONS if w != d.PIN) == table.DECISIONS


def test_pure_no_numpy_or_pandas() -> None:
    lines = Path(d.__file__).read_text(encoding="utf-8").splitlines()
    imports = [line for line in lines if line.startswith(("import ", "from "))]
    assert imports == ["from __future__ import annotations"]
