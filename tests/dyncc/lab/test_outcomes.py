"""The lab summary's per-class phases and effects (pure): who is treated / held out / reverted,
when each phase starts, and the per-phase values fed to the difference in differences."""

from __future__ import annotations

from dyncc.lab.model import ControlOutcome, PrefixScore
from dyncc.lab.outcomes import RoundView, class_outcomes, phases

B = 15
T0 = 1_800_000_000 // B * B
HOSTS = {"lab-a": ["lab-a-e0", "lab-a-e1"]}
T1, T2, H1, D1, F1 = (
    "2001:db8:101:100::/56",
    "2001:db8:101:200::/56",
    "2001:db8:101:300::/56",
    "2001:db8:102:100::/56",
    "2001:db8:105:100::/56",
)
CLASSES = {T1: "lossy", T2: "lossy", H1: "lossy", D1: "deep", F1: "fine"}
POPS = dict.fromkeys(CLASSES, "lab-a")


def _score(decision: str, reason: str = "") -> PrefixScore:
    return PrefixScore("lab-a", 3, 1.0, 0.0, 30.0, decision, reason)


def _rounds() -> list[RoundView]:
    """Round 3: T1, T2, D1 selected, H1 holdout; canary (e0) in round 3, the POP in round 5;
    D1 reverted in round 8."""
    out = []
    for r in range(1, 11):
        scores = {F1: _score("skip")}
        routes: dict[str, dict[str, str]] = {"lab-a-e0": {}, "lab-a-e1": {}}
        if r >= 3:
            scores |= {T1: _score("select" if r == 3 else "keep"), T2: _score("select" if r == 3 else "keep")}
            scores[H1] = _score("holdout")
            scores[D1] = _score(
                "select" if r == 3 else ("keep" if r < 8 else ("revert" if r == 8 else "skip")),
                "negative effect" if r == 8 else "",
            )
            on = [T1, T2] + ([D1] if r < 8 else [])
            routes["lab-a-e0"] = dict.fromkeys(on, "bbr")
            if r >= 5:
                routes["lab-a-e1"] = dict.fromkeys(on, "bbr")
        out.append(RoundView(r, T0 + r * B, ControlOutcome(scores, routes)))
    return out


def test_phases_groups_and_windows():
    ph = phases(_rounds(), CLASSES, POPS, HOSTS, B)
    assert ph[T1].group == "treated" and ph[T1].selected_round == 3 and ph[T1].promoted_round == 5
    assert ph[T1].before == (T0, T0 + 2 * B)  # buckets of rounds 1-2
    assert ph[T1].after == (T0 + 5 * B, T0 + 10 * B)  # from the POP-wide promotion to the end
    assert ph[D1].reverted_round == 8 and ph[D1].reason == "negative effect"
    assert ph[D1].after == (T0 + 5 * B, T0 + 8 * B)  # until the revert
    assert ph[H1].group == "holdout" and ph[H1].before == (T0, T0 + 2 * B)
    assert ph[H1].after == (T0 + 5 * B, T0 + 10 * B)  # from its class's promotion
    assert ph[F1].group == "none"
    c = class_outcomes(ph)
    assert (c["lossy"].prefixes, c["lossy"].selected, c["lossy"].holdout, c["lossy"].reverted) == (3, 2, 1, 0)
    assert (c["deep"].selected, c["deep"].reverted, c["deep"].revert_rounds) == (1, 1, [8])
    assert c["fine"].selected == 0 and c["lossy"].first_selected_round == 3
