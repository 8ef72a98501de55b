"""The reason texts of a round's decisions (controller/scoring/decide.py): each row's reason,
built once per distinct set of values (most prefixes share one).  Pure."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from controller.evidence.model import CUBIC
from controller.scoring.decide_stages import Candidates, Cap, Outcome, Rows, Standing, Started, State, Trials, Watch
from controller.scoring.settings import ScoringSettings
from controller.store.decisions import OVER_CAP

Mask = np.ndarray


def _fmt_rate(bytes_per_s: float) -> str:
    if not math.isfinite(bytes_per_s):
        return "n/a"
    return f"{bytes_per_s * 8 / 1e6:.2f} Mbit/s"


def _pct(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value * 100:+.0f}%"


def _fmt_hours(seconds: float) -> str:
    """A duration for a reason text: hours, or minutes / seconds below two of the next unit (a lab clock)."""
    if abs(seconds) >= 7200:
        return f"{seconds / 3600:.1f} h"
    if abs(seconds) >= 120:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"


class Texts:
    """The reason texts, each built once per distinct set of values (most prefixes share one)."""

    def __init__(self, cfg: ScoringSettings, now: int, duty: np.ndarray, flap: np.ndarray, counted: np.ndarray) -> None:
        self.cfg = cfg
        self.now = now
        self.duty, self.flap, self.counted = duty, flap, counted

    def put(self, out: np.ndarray, rows: np.ndarray, fn: Callable[..., str], *columns: np.ndarray) -> None:
        """out[rows] = fn(row values of `columns`...), memoized on those values."""
        idx = np.flatnonzero(rows)
        if not len(idx):
            return
        memo: dict[tuple[Any, ...], str] = {}
        picked = [c[idx] for c in (self.duty, self.flap, self.counted, *columns)]
        values = [c.tolist() for c in picked]
        # the key: floats by their bits (-0.0 and 0.0 print differently but compare equal)
        keys = [c.view(np.int64).tolist() if c.dtype == np.float64 else v for c, v in zip(picked, values, strict=True)]
        texts = []
        for key, args in zip(zip(*keys, strict=True), zip(*values, strict=True), strict=True):
            text = memo.get(key)
            if text is None:
                text = memo[key] = fn(*args)
            texts.append(text)
        out[idx] = texts

    def duty_s(self, du: float, fl: float, c: int) -> str:
        return f"duty {du:.2f} flap {fl:.2f} over {c} buckets"

    def select(self, du: float, fl: float, c: int, rtt: float, low: float) -> str:
        return f"candidate: {self.duty_s(du, fl, c)}, min_rtt {rtt:.1f} ms; baseline low rate {_fmt_rate(low)}"

    def held(self, du: float, fl: float, c: int, since: int) -> str:
        return f"on BBR for {_fmt_hours(self.now - since)} (no trial: trials are off)"

    def kept(self, du: float, fl: float, c: int, eff: float, lo: float, hi: float) -> str:
        return f"on BBR: kept by its trial (effect {_pct(eff)} [{_pct(lo)}, {_pct(hi)}])"

    def denied(self, du: float, fl: float, c: int, why: str) -> str:
        return f"denied: {why}"

    def no_traffic(self, du: float, fl: float, c: int, seen: int) -> str:
        return f"no traffic for {_fmt_hours(self.now - seen)}: released"

    def holdout(self, du: float, fl: float, c: int, candidate: bool) -> str:
        what = "candidate" if candidate else "earlier candidate"
        return f"holdout (control group, {self.cfg.holdout_fraction:.0%} by hash): {what}, {self.duty_s(du, fl, c)}"

    def cooldown(self, du: float, fl: float, c: int, until: int) -> str:
        return f"cooldown after a revert: {_fmt_hours(until - self.now)} left"

    def capped(self, du: float, fl: float, c: int) -> str:
        cfg = self.cfg
        return (
            f"capped: candidate ({self.duty_s(du, fl, c)}) but max {cfg.max_new_per_round} new per round, "
            f"{cfg.max_per_pop} per POP"
        )

    def over_cap(self, du: float, fl: float, c: int, on_bbr: int, pinned: int, low: float) -> str:
        pins = f", {pinned} of them pinned" if pinned else ""
        evidence = f"trial effect lower bound {_pct(low)}" if math.isfinite(low) else "no trial effect interval"
        return (
            f"{OVER_CAP}: --max-bbr-per-pop {self.cfg.max_per_pop} with {on_bbr} on BBR{pins}; the weakest "
            f"evidence leaves first ({evidence}, duty {du:.2f})"
        )

    def too_few(self, du: float, fl: float, c: int) -> str:
        return (
            f"too few samples: counted in {c} buckets, needs {self.cfg.min_buckets} "
            f"(>= {self.cfg.min_samples} qualifying samples per bucket)"
        )

    def low_rtt(self, du: float, fl: float, c: int, buckets: int, rtt: float) -> str:
        return (
            f"low RTT: median min_rtt below {self.cfg.min_rtt_ms:g} ms in {buckets} of {c} buckets (mean {rtt:.1f} ms)"
        )

    def not_candidate(self, du: float, fl: float, c: int) -> str:
        cfg = self.cfg
        return f"not a candidate: {self.duty_s(du, fl, c)} (needs duty >= {cfg.min_duty:g}, flap <= {cfg.max_flap:g})"


def reasons(
    r: Rows, c: Candidates, s: Standing, w: Watch, t: Trials, st: Started, over: Cap, o: Outcome, state: State,
    trial_keep: Mask, revert_effect: Mask, on_now: Mask, keep_arm: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """The reason of every row that is not skipped (a skipped row's: `skip_reasons`)."""
    cols, n = r.cols, r.n
    reason = np.full(n, "", dtype=object)
    texts = Texts(r.cfg, r.now, cols["duty_cycle"], cols["flap_ratio"], cols["counted_buckets"])
    put = texts.put
    started = o.trial & st.new_trial
    put(reason, o.select | started, texts.select, cols["median_min_rtt_ms"], cols["low_delivery_rate"])
    for j in np.flatnonzero(started).tolist():
        reason[j] = f"{reason[j]}; trial starts, first block {st.arm[j]}"
    from_trial = (o.trial & ~st.new_trial) | (o.keep & trial_keep) | (o.revert & t.revert & ~over.over)
    reason[from_trial] = t.why[from_trial]
    reason[o.revert & w.revert] = w.why[o.revert & w.revert]
    kept_before = o.keep & ~trial_keep
    by_trial = (state.trial_since > 0) & np.isfinite(state.trial_effect)
    put(reason, kept_before & by_trial, texts.kept, state.trial_effect, state.trial_low, state.trial_high)
    put(reason, kept_before & ~by_trial, texts.held, state.selected_since)
    if w.config is not None:
        for j in np.flatnonzero(o.keep).tolist():
            if w.why[j]:
                reason[j] = f"{reason[j]}; {w.why[j]}"
            if keep_arm[j] == CUBIC:
                reason[j] = f"{reason[j]}; holdback bucket on CUBIC"
    for j in np.flatnonzero(o.revert & revert_effect).tolist():
        retry = t.config is not None and t.inconclusive[j]
        wait = t.config.trial_retry_seconds if t.config is not None and retry else r.cfg.cooldown_seconds
        reason[j] = f"{reason[j]}; {'may be selected again after' if retry else 'cooldown'} {_fmt_hours(wait)}"
    put(reason, o.revert & s.refused, texts.denied, s.denied)
    put(reason, o.revert & ~s.refused & ~revert_effect & ~over.over, texts.no_traffic, c.last_seen)
    cap_counts = np.zeros(n, dtype=np.int64)  # on BBR before the cap, per POP (BBR pins included)
    pin_counts = np.zeros(n, dtype=np.int64)
    for a, b in r.bounds:
        cap_counts[a:b] = int((over.over | on_now | s.pinned_bbr)[a:b].sum())
        pin_counts[a:b] = int(s.pinned_bbr[a:b].sum())
    put(reason, o.revert & over.over, texts.over_cap, cap_counts, pin_counts, over.evidence_low)
    put(reason, o.holdout, texts.holdout, s.candidate)
    return reason


def skip_reasons(
    reason: np.ndarray, r: Rows, c: Candidates, s: Standing, o: Outcome, state: State, capped: Mask
) -> np.ndarray:
    """`reason` with each skipped row's: the first rule that applies, in this order."""
    cols, cfg = r.cols, r.cfg
    out = reason.copy()
    texts = Texts(cfg, r.now, cols["duty_cycle"], cols["flap_ratio"], cols["counted_buckets"])
    left = o.skip.copy()
    for rule, fn, args in (
        (s.refused, texts.denied, (s.denied,)),
        (s.candidate & c.in_cooldown, texts.cooldown, (state.cooldown_until,)),
        (capped, texts.capped, ()),
        (c.in_cooldown, texts.cooldown, (state.cooldown_until,)),
        (~r.scored, None, "no data in the window"),
        (cols["qualifying"] == 0, None, f"no qualifying flows (bytes_acked > {cfg.min_bytes} B) in the window"),
        (~c.eligible, texts.too_few, ()),
        (c.low_rtt, texts.low_rtt, (cols["low_rtt_buckets"], cols["median_min_rtt_ms"])),
        (left, texts.not_candidate, ()),
    ):
        here = left & rule
        if fn is None:
            out[here] = args
        else:
            texts.put(out, here, fn, *args)
        left &= ~here
    return out


def pin_reasons(reason: np.ndarray, pinned: Mask, pin_algo: np.ndarray, pin_text: np.ndarray) -> np.ndarray:
    """`reason` with a pin's reason on each pinned row, and a note on each pin the deny list beat."""
    out = reason.copy()
    out[pinned] = pin_text[pinned]
    for j in np.flatnonzero((pin_algo != "") & ~pinned).tolist():
        out[j] = f"{out[j]}; pinned to {pin_algo[j]}, not applied: the deny list wins"
    return out
