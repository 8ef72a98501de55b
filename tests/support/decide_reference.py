"""The decision code as it was before the scoring round was made faster: the reference for
tests/controller/scoring/test_decide_equal.py, which checks that controller/scoring/decide.py
decides exactly the same on random data.  Frozen but for one rule change: a prefix on BBR is no
longer reverted on a point ratio against its baseline (reverts by effect come from trials,
controller/evidence), and the trial columns are there (no trials: 0 / nan).  Pure pandas, no I/O.
It never runs trials, pins or the watch: tests/support/decide_oracle.py covers those.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from controller.scoring.decide import STATE_COLUMNS, empty_state
from controller.scoring.settings import ScoringSettings
from controller.store.decisions import HOLDOUT, KEEP, REVERT, SELECT, SKIP
from controller.store.decisions import ON_BBR_FOR_GOOD as ON_BBR
from schemas.addresses import prefix_family

if TYPE_CHECKING:
    import pandas as pd

SCORE_COLUMNS: dict[str, str] = {
    "pop": "object",
    "prefix": "object",
    "family": "int64",
    "samples": "int64",
    "qualifying": "int64",
    "counted_buckets": "int64",
    "bad_buckets": "int64",
    "transitions": "int64",
    "duty_cycle": "float64",
    "flap_ratio": "float64",
    "median_delivery_rate": "float64",
    "low_delivery_rate": "float64",
    "median_min_rtt_ms": "float64",
    "low_rtt_buckets": "int64",
}


def holdout_hash(pop: str, prefix: str, salt: str) -> float:
    """The control group's stable hash, written here again (not decide's own)."""
    digest = hashlib.blake2b(f"{salt}|{pop}|{prefix}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def normalize_scores(df: pd.DataFrame | None) -> pd.DataFrame:
    """Same dtypes from both back ends (chDB and clickhouse-driver differ), sorted by pop, prefix."""
    import pandas as pd

    out = pd.DataFrame(
        {
            name: (df[name] if df is not None and name in df else pd.Series([], dtype=t))
            for name, t in SCORE_COLUMNS.items()
        }
    )
    for name, dtype in SCORE_COLUMNS.items():
        if dtype == "object":
            if len(out) and not isinstance(out[name].iat[0], str):
                out[name] = out[name].map(_text)
            out[name] = out[name].astype(object)
        else:
            out[name] = out[name].astype(np.dtype(dtype))
    return out.sort_values(["pop", "prefix"], kind="stable").reset_index(drop=True)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _fmt_rate(bytes_per_s: float) -> str:
    if not math.isfinite(bytes_per_s):
        return "n/a"
    return f"{bytes_per_s * 8 / 1e6:.2f} Mbit/s"


def _fmt_hours(seconds: float) -> str:
    """A duration for a reason text: hours, or minutes / seconds below two of the next unit (a lab clock)."""
    if abs(seconds) >= 7200:
        return f"{seconds / 3600:.1f} h"
    if abs(seconds) >= 120:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"


def reference_decide(
    scores: pd.DataFrame,
    previous: pd.DataFrame,
    now: int,
    cfg: ScoringSettings,
    expire_seconds: int = 7 * 86400,
    refuse: Callable[[str], str | None] | None = None,
) -> pd.DataFrame:
    """Decisions for every scored or stateful prefix; see the module docstring.

    `scores`: columns of controller.scoring.query.SCORE_COLUMNS; `previous`:
    STATE_COLUMNS (the previous round's rows).  Returns one row per (pop, prefix)
    with the score columns, decision, algorithm, reason, holdout and the new state.
    """
    import pandas as pd

    scores = normalize_scores(scores)
    prev = previous.loc[:, list(STATE_COLUMNS)].copy() if len(previous) else empty_state()
    prev = prev.rename(columns={"decision": "prev_decision"})
    df = scores.merge(prev, on=["pop", "prefix"], how="outer", indicator=True)
    df = df.sort_values(["pop", "prefix"], kind="stable").reset_index(drop=True)
    scored = (df["_merge"] != "right_only").to_numpy()
    df = df.drop(columns="_merge")
    for name, dtype in SCORE_COLUMNS.items():
        if name in ("pop", "prefix"):
            continue
        fill = 0 if dtype == "int64" else math.nan
        df[name] = df[name].fillna(fill).astype(np.dtype(dtype))
    if not scored.all():  # rows carried from the state without data: their prefix's family, not 0
        df.loc[~scored, "family"] = np.array([prefix_family(str(p)) for p in df.loc[~scored, "prefix"]], "int64")
    df["prev_decision"] = df["prev_decision"].fillna("").astype(object)
    for name in ("selected_since", "holdout_since", "cooldown_until", "last_seen"):
        df[name] = df[name].fillna(0).astype("int64")
    df["baseline_low_rate"] = df["baseline_low_rate"].astype("float64")

    n = len(df)
    prev_dec = df["prev_decision"].to_numpy()
    counted = df["counted_buckets"].to_numpy()
    duty = df["duty_cycle"].to_numpy()
    flap = df["flap_ratio"].to_numpy()
    rtt = df["median_min_rtt_ms"].to_numpy()
    low = df["low_delivery_rate"].to_numpy()
    baseline = df["baseline_low_rate"].to_numpy()
    selected_since = df["selected_since"].to_numpy().copy()
    holdout_since = df["holdout_since"].to_numpy().copy()
    cooldown_until = df["cooldown_until"].to_numpy().copy()
    last_seen = df["last_seen"].to_numpy().copy()
    seen = scored & (df["samples"].to_numpy() > 0)
    last_seen[seen] = now

    was_bbr = np.isin(prev_dec, ON_BBR)
    was_holdout = prev_dec == HOLDOUT
    in_cooldown = cooldown_until > now
    eligible = scored & (counted >= cfg.min_buckets)
    measurable = eligible & np.isfinite(low) & (low > 0)
    low_rtt = eligible & (df["low_rtt_buckets"].to_numpy() * 2 > counted)  # median min_rtt below
    candidate = eligible & ~low_rtt & (duty >= cfg.min_duty) & (flap <= cfg.max_flap)
    pops = df["pop"].to_numpy()
    prefixes = df["prefix"].to_numpy()
    denied = np.full(n, "", dtype=object)
    if refuse is not None:
        for j in np.flatnonzero(candidate | was_bbr | was_holdout):
            denied[j] = refuse(str(prefixes[j])) or ""
    refused = denied != ""
    candidate &= ~refused
    hashed = np.zeros(n, dtype=bool)
    for j in np.flatnonzero((candidate | was_holdout) & ~was_bbr):
        hashed[j] = holdout_hash(pops[j], prefixes[j], cfg.holdout_salt) < cfg.holdout_fraction
    expired = (~seen) & (last_seen > 0) & (now - last_seen >= expire_seconds)

    with np.errstate(divide="ignore", invalid="ignore"):
        effect = np.where(measurable & (baseline > 0), low / baseline, math.nan)

    decision = np.full(n, SKIP, dtype=object)
    reason = np.full(n, "", dtype=object)

    # Holdouts: candidates in the hash group, and earlier holdouts that are still seen.
    holdout = hashed & ~was_bbr & ~in_cooldown & ~refused & (candidate | (was_holdout & ~expired))
    new_holdout = holdout & ~was_holdout
    holdout_since[new_holdout] = now
    baseline_out = baseline.copy()
    baseline_out[new_holdout] = low[new_holdout]
    holdout_since[~holdout] = 0

    # The holdout group's change, per POP, over holdouts held at least min_hold.
    mature_holdout = holdout & ~new_holdout & (now - holdout_since >= cfg.min_hold_seconds) & np.isfinite(effect)
    holdout_change = np.full(n, math.nan)
    for pop in np.unique(pops):
        in_pop = pops == pop
        values = effect[in_pop & mature_holdout]
        holdout_change[in_pop] = float(np.median(values)) if len(values) else math.nan

    # Prefixes on BBR: hold, then revert only on a measured negative effect.
    held = was_bbr & (now - selected_since < cfg.min_hold_seconds)
    worse_than_before = effect < 1.0 - cfg.revert_margin
    worse_than_holdout = ~np.isfinite(holdout_change) | (effect < holdout_change - cfg.revert_margin)
    revert_denied = was_bbr & refused
    # reverts by effect come from trials now (controller/evidence): none without one
    revert_effect = was_bbr & ~held & ~refused & np.isfinite(effect) & worse_than_before & worse_than_holdout & False
    revert_expired = was_bbr & ~held & ~refused & ~revert_effect & expired
    keep = was_bbr & ~revert_effect & ~revert_expired & ~revert_denied

    # New selections: candidates not on BBR, not holdout, not cooling down; capped per POP.
    pending = candidate & ~was_bbr & ~holdout & ~in_cooldown
    select = np.zeros(n, dtype=bool)
    capped = np.zeros(n, dtype=bool)
    for pop in np.unique(pops[pending]) if pending.any() else []:
        in_pop = pops == pop
        room = max(0, cfg.max_per_pop - int((keep & in_pop).sum()))
        allowed = min(room, cfg.max_new_per_round)
        idx = np.flatnonzero(pending & in_pop)
        order = np.lexsort((prefixes[idx], low[idx], flap[idx], -duty[idx]))  # worst duty first
        ranked = idx[order]
        select[ranked[:allowed]] = True
        capped[ranked[allowed:]] = True

    decision[keep] = KEEP
    decision[revert_effect | revert_expired | revert_denied] = REVERT
    decision[holdout] = HOLDOUT
    decision[select] = SELECT

    selected_since[select] = now
    baseline_out[select] = low[select]
    cooldown_until[revert_effect] = now + cfg.cooldown_seconds
    selected_since[~(keep | select)] = 0
    clear_baseline = ~(keep | select | holdout)
    baseline_out[clear_baseline] = math.nan

    # plain lists: formatting numpy scalars one by one is slow at 200k prefixes
    lists = {
        "decision": decision,
        "held": held,
        "effect": effect,
        "baseline": baseline,
        "low": low,
        "selected_since": selected_since,
        "revert_effect": revert_effect,
        "last_seen": last_seen,
        "candidate": candidate,
        "rtt": rtt,
        "holdout_change": holdout_change,
        "scored": scored,
        "in_cooldown": in_cooldown,
        "cooldown_until": cooldown_until,
        "counted": counted,
        "eligible": eligible,
        "low_rtt": low_rtt,
        "capped": capped,
        "qualifying": df["qualifying"].to_numpy(),
        "low_rtt_buckets": df["low_rtt_buckets"].to_numpy(),
        "denied": denied,
    }
    v: dict[str, list[Any]] = {k: np.asarray(a).tolist() for k, a in lists.items()}
    duty_s = [
        f"duty {du:.2f} flap {fl:.2f} over {c} buckets"
        for du, fl, c in zip(duty.tolist(), flap.tolist(), v["counted"], strict=True)
    ]
    for i in range(n):
        d = v["decision"][i]
        if d == SELECT:
            reason[i] = (
                f"candidate: {duty_s[i]}, min_rtt {v['rtt'][i]:.1f} ms; baseline low rate {_fmt_rate(v['low'][i])}"
            )
        elif d == KEEP:  # no trials: on BBR until denied or gone
            reason[i] = f"on BBR for {_fmt_hours(now - v['selected_since'][i])} (no trial: trials are off)"
        elif d == REVERT:
            if v["denied"][i]:
                reason[i] = f"denied: {v['denied'][i]}"
            elif v["revert_effect"][i]:
                reason[i] = (
                    f"negative effect: low rate {_fmt_rate(v['baseline'][i])} -> {_fmt_rate(v['low'][i])} "
                    f"(x{v['effect'][i]:.2f}, holdout x{v['holdout_change'][i]:.2f}); cooldown "
                    f"{_fmt_hours(cfg.cooldown_seconds)}"
                )
            else:
                reason[i] = f"no traffic for {_fmt_hours(now - v['last_seen'][i])}: released"
        elif d == HOLDOUT:
            what = "candidate" if v["candidate"][i] else "earlier candidate"
            reason[i] = f"holdout (control group, {cfg.holdout_fraction:.0%} by hash): {what}, {duty_s[i]}"
        else:
            reason[i] = _skip_reason(i, v, duty_s, cfg, now)

    out = df[["pop", "prefix", *[c for c in SCORE_COLUMNS if c not in ("pop", "prefix")]]].copy()
    out["decision"] = decision
    out["algorithm"] = np.where(np.isin(decision, ON_BBR), cfg.algorithm, "cubic")
    out["reason"] = reason
    out["holdout"] = holdout.astype("uint8")
    out["selected_since"] = selected_since
    out["holdout_since"] = holdout_since
    out["cooldown_until"] = np.where(cooldown_until > now, cooldown_until, 0)
    out["last_seen"] = last_seen
    out["baseline_low_rate"] = baseline_out
    out["effect"] = effect
    out["holdout_effect"] = holdout_change
    out["trial_since"] = np.zeros(len(out), dtype="int64")
    out["trial_effect"] = out["trial_low"] = out["trial_high"] = math.nan
    out["new"] = decision == SELECT
    out["trial_ended"] = ""
    out["scored"] = scored
    # Rows worth writing: every scored prefix, plus unscored ones carrying state.
    keep_row = scored | np.isin(decision, (*ON_BBR, HOLDOUT, REVERT)) | (out["cooldown_until"].to_numpy() > 0)
    return pd.DataFrame(out[keep_row]).reset_index(drop=True)


def _skip_reason(i: int, v: dict[str, list[Any]], duty_s: list[str], cfg: ScoringSettings, now: int) -> str:
    if v["denied"][i]:
        return f"denied: {v['denied'][i]}"
    if v["candidate"][i] and v["in_cooldown"][i]:
        return f"cooldown after a revert: {_fmt_hours(v['cooldown_until'][i] - now)} left"
    if v["capped"][i]:
        return (
            f"capped: candidate ({duty_s[i]}) but max {cfg.max_new_per_round} new per round, {cfg.max_per_pop} per POP"
        )
    if v["in_cooldown"][i]:
        return f"cooldown after a revert: {_fmt_hours(v['cooldown_until'][i] - now)} left"
    if not v["scored"][i]:
        return "no data in the window"
    if int(v["qualifying"][i]) == 0:
        return f"no qualifying flows (bytes_acked > {cfg.min_bytes} B) in the window"
    if not v["eligible"][i]:
        return (
            f"too few samples: counted in {v['counted'][i]} buckets, needs {cfg.min_buckets} "
            f"(>= {cfg.min_samples} qualifying samples per bucket)"
        )
    if v["low_rtt"][i]:
        return (
            f"low RTT: median min_rtt below {cfg.min_rtt_ms:g} ms in {v['low_rtt_buckets'][i]} of "
            f"{v['counted'][i]} buckets (mean {v['rtt'][i]:.1f} ms)"
        )
    return f"not a candidate: {duty_s[i]} (needs duty >= {cfg.min_duty:g}, flap <= {cfg.max_flap:g})"
