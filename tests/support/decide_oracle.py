"""An oracle of controller/scoring/decide.py `decide` with trials, the watch, pins, the cap and the
deny list: the rules of decide.py's docstring written again one prefix at a time in plain Python
(dicts and sorted lists, no numpy masks), sharing no code with decide.py or its stages.  It reads
only the effect model's verdicts (controller/evidence/trial.py), the pin reason text
(controller/scoring/pins.py) and the decision words.

It answers the columns that decide: decision, algorithm, selected_since, cooldown_until,
trial_since, trial_ended, new, holdout and last_seen, and the kind of each reason (see `KINDS`).
tests/controller/scoring/test_decide_oracle.py compares it with decide() on random inputs.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from controller.evidence.model import BBR, CUBIC, Effect, none
from controller.evidence.settings import EvidenceSettings
from controller.evidence.trial import GO_ON, INCONCLUSIVE, judge, next_arm, watch_arm, watch_verdict
from controller.scoring.pins import Pin, pin_reason
from controller.scoring.settings import ScoringSettings
from controller.store.decisions import HOLDOUT, KEEP, PIN, REVERT, SELECT, SKIP, TRIAL

Key = tuple[str, str]


def _hash(pop: str, prefix: str, salt: str) -> float:
    digest = hashlib.blake2b(f"{salt}|{pop}|{prefix}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def _num(x: float) -> tuple[bool, float]:
    """A sort key that puts NaN last, as numpy's sorts do."""
    return (math.isnan(x), 0.0 if math.isnan(x) else x)


def _finite(x: float, trial_since: int) -> float:
    """A cap rank: no trial (trial_since 0) or no finite value is no evidence, first of all."""
    return x if trial_since > 0 and math.isfinite(x) else -math.inf


@dataclass
class Row:
    pop: str
    prefix: str
    score: dict[str, Any] | None
    prev: dict[str, Any]
    out: dict[str, Any]


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): v for k, v in rec.items()} for rec in df.to_dict("records")]


def _rows(scores: pd.DataFrame, previous: pd.DataFrame, pins: Mapping[Key, Pin]) -> list[Row]:
    by_key: dict[Key, Row] = {}
    for rec in _records(scores):
        key = (str(rec["pop"]), str(rec["prefix"]))
        by_key[key] = Row(key[0], key[1], rec, {}, {})
    for rec in _records(previous):
        key = (str(rec["pop"]), str(rec["prefix"]))
        row = by_key.setdefault(key, Row(key[0], key[1], None, {}, {}))
        if not row.prev:  # a duplicate: the first counts
            row.prev = rec
    for key in pins:
        by_key.setdefault(key, Row(key[0], key[1], None, {}, {}))
    return [by_key[k] for k in sorted(by_key)]


def oracle(
    scores: pd.DataFrame, previous: pd.DataFrame, now: int, cfg: ScoringSettings, expire_seconds: int,
    refuse: Callable[[str], str | None] | None, evidence: EvidenceSettings | None,
    trial_effects: Mapping[Key, Effect], pins: Mapping[Key, Pin], watch_effects: Mapping[Key, Effect],
) -> list[dict[str, Any]]:  # fmt: skip
    """One dict per written row, sorted by (pop, prefix)."""
    ev = evidence if evidence is not None and evidence.trials else None
    watch_cfg = evidence if evidence is not None and evidence.holdback > 0 else None
    rows = _rows(scores, previous, pins)
    for r in rows:
        _first_pass(r, now, cfg, expire_seconds, refuse, ev, watch_cfg, trial_effects, pins, watch_effects)
    pops = sorted({r.pop for r in rows})
    for pop in pops:
        _cap_and_select(
            [r for r in rows if r.pop == pop], now, cfg, ev
        )  # fmt: skip
    out = [_finish(r, now, cfg, ev, watch_cfg) for r in rows]
    return [row for row in out if row.pop("written")]


def _first_pass(
    r: Row, now: int, cfg: ScoringSettings, expire: int, refuse: Callable[[str], str | None] | None,
    ev: EvidenceSettings | None, watch_cfg: EvidenceSettings | None, trial_effects: Mapping[Key, Effect],
    pins: Mapping[Key, Pin], watch_effects: Mapping[Key, Effect],
) -> None:  # fmt: skip
    s, p, o = r.score, r.prev, r.out

    def g(name: str, default: float) -> Any:
        return s[name] if s is not None else default

    prev = str(p.get("decision", "") or "")
    last_seen = int(p.get("last_seen", 0) or 0)
    seen = s is not None and int(s["samples"]) > 0
    if seen:
        last_seen = now
    counted = int(g("counted_buckets", 0))
    eligible = s is not None and counted >= cfg.min_buckets
    low_rtt = eligible and int(s["low_rtt_buckets"]) * 2 > counted  # type: ignore[index]
    duty, flap = float(g("duty_cycle", math.nan)), float(g("flap_ratio", math.nan))
    candidate = eligible and not low_rtt and duty >= cfg.min_duty and flap <= cfg.max_flap
    cooldown = int(p.get("cooldown_until", 0) or 0)
    expired = not seen and last_seen > 0 and now - last_seen >= expire
    was_bbr, was_trial, was_holdout = prev in (SELECT, KEEP), prev == TRIAL, prev == HOLDOUT
    pin = pins.get((r.pop, r.prefix))
    denied = ""
    if refuse is not None and (candidate or was_bbr or was_trial or was_holdout or pin is not None):
        denied = refuse(r.prefix) or ""
    pinned = pin is not None and not (denied and pin.algorithm != CUBIC)
    if pinned:
        candidate = was_bbr = was_trial = was_holdout = False
    candidate = candidate and not denied
    hashed = (candidate or was_holdout) and not was_bbr and not was_trial
    hashed = hashed and _hash(r.pop, r.prefix, cfg.holdout_salt) < cfg.holdout_fraction
    holdout = hashed and cooldown <= now and not denied and (candidate or (was_holdout and not expired))
    selected_since = int(p.get("selected_since", 0) or 0)
    held = was_bbr and now - selected_since < cfg.min_hold_seconds
    revert_denied = (was_bbr or was_trial) and bool(denied)
    revert_expired = ((was_bbr and not held) or was_trial) and not denied and expired
    keep = was_bbr and not revert_expired and not revert_denied
    revert_watch = False
    if watch_cfg is not None and keep:
        eff = watch_effects.get((r.pop, r.prefix)) or none("no holdback samples read", watch_cfg.level)
        if watch_verdict(eff, cfg.revert_margin).action == REVERT and not held:
            revert_watch, keep = True, False
    trial_since = int(p.get("trial_since", 0) or 0)
    t_low, t_est = float(p.get("trial_low", math.nan)), float(p.get("trial_effect", math.nan))
    verdict, arm, inconclusive = "", "", False
    if was_trial and not revert_denied and not revert_expired:
        if ev is None:
            verdict = KEEP
        else:
            eff = trial_effects.get((r.pop, r.prefix)) or none("no samples read for the trial", ev.level)
            t_low, t_est = eff.low, eff.estimate
            v = judge(eff, max(0, (now - trial_since) // cfg.bucket_seconds), ev)
            verdict = v.action
            inconclusive = v.why.startswith(INCONCLUSIVE)
            if verdict == GO_ON:
                arm = next_arm(r.pop, r.prefix, trial_since, eff.n_a, eff.n_b, ev)
    o.update(
        seen=seen, last_seen=last_seen, candidate=candidate, cooldown=cooldown, in_cooldown=cooldown > now,
        was_bbr=was_bbr, was_trial=was_trial, denied=denied, pin=pin if pinned else None, unapplied_pin=pin,
        holdout=holdout, new_holdout=holdout and not was_holdout, selected_since=selected_since,
        revert_denied=revert_denied, revert_expired=revert_expired, keep=keep or verdict == KEEP,
        trial_keep=verdict == KEEP, trial_go=verdict == GO_ON, trial_revert=verdict == REVERT,
        inconclusive=inconclusive, revert_watch=revert_watch, arm=arm, trial_since=trial_since,
        rank=(_finite(t_low, trial_since), _finite(t_est, trial_since), _num(duty), r.prefix),
        pick=(_num(-duty), _num(flap), _num(float(g("low_delivery_rate", math.nan))), r.prefix),
        over_cap=False, select=False, capped=False, new_trial=False, scored=s is not None,
    )  # fmt: skip


def _cap_and_select(rows: list[Row], now: int, cfg: ScoringSettings, ev: EvidenceSettings | None) -> None:
    """One POP: the cap (weakest evidence leaves first), then new selections within the room."""
    pinned_bbr = sum(1 for r in rows if r.out["pin"] is not None and r.out["pin"].algorithm != CUBIC)
    on = [r for r in rows if r.out["keep"] or r.out["trial_go"]]
    limit = max(0, cfg.max_per_pop - pinned_bbr)
    for r in sorted(on, key=lambda r: r.out["rank"])[: max(0, len(on) - limit)]:
        r.out.update(over_cap=True, keep=False, trial_keep=False, trial_go=False)
    on_now = sum(1 for r in rows if r.out["keep"] or r.out["trial_go"])
    pending = [
        r for r in rows
        if r.out["candidate"] and not r.out["was_bbr"] and not r.out["was_trial"] and not r.out["holdout"]
        and not r.out["in_cooldown"]
    ]  # fmt: skip
    allowed = min(max(0, cfg.max_per_pop - on_now - pinned_bbr), cfg.max_new_per_round)
    for i, r in enumerate(sorted(pending, key=lambda r: r.out["pick"])):
        r.out["select" if i < allowed else "capped"] = True
        if i < allowed and ev is not None:
            r.out.update(select=False, new_trial=True, arm=next_arm(r.pop, r.prefix, now, 0, 0, ev))


def _decision(o: dict[str, Any]) -> str:
    revert_effect = (o["trial_revert"] and not o["over_cap"]) or o["revert_watch"]
    o["revert_effect"] = revert_effect
    if o["pin"] is not None:
        return PIN
    if o["select"]:
        return SELECT
    if o["trial_go"] or o["new_trial"]:
        return TRIAL
    if o["holdout"]:
        return HOLDOUT
    if revert_effect or o["revert_expired"] or o["revert_denied"] or o["over_cap"]:
        return REVERT
    return KEEP if o["keep"] else SKIP


def _finish(
    r: Row, now: int, cfg: ScoringSettings, ev: EvidenceSettings | None, watch_cfg: EvidenceSettings | None
) -> dict[str, Any]:
    o = r.out
    d = _decision(o)
    in_trial = d == TRIAL
    selected_since = o["selected_since"]
    if d == SELECT or o["trial_keep"]:
        selected_since = now
    if not (o["keep"] or d == SELECT or in_trial):
        selected_since = 0
    trial_since = now if o["new_trial"] else o["trial_since"]
    if in_trial:
        selected_since = trial_since
    if watch_cfg is not None and d == SELECT:
        trial_since = now
    stays = in_trial or d == KEEP or (d == REVERT and (o["was_trial"] or o["revert_watch"]))
    if not (stays or (d == SELECT and watch_cfg is not None)) or d == PIN:
        trial_since = 0
    cooldown = o["cooldown"]
    if o["revert_effect"]:
        retry = ev is not None and o["inconclusive"]
        cooldown = now + (ev.trial_retry_seconds if retry and ev is not None else cfg.cooldown_seconds)
    if d == PIN:
        algorithm = o["pin"].algorithm
    elif d == KEEP:
        bucket = now - now % max(cfg.bucket_seconds, 1)
        holdback = watch_cfg is not None and watch_arm(
            r.pop, r.prefix, selected_since, bucket, cfg.bucket_seconds, watch_cfg
        ) == CUBIC  # fmt: skip
        algorithm = CUBIC if holdback else cfg.algorithm
    elif d == SELECT or (d == TRIAL and o["arm"] == BBR):
        algorithm = cfg.algorithm
    else:
        algorithm = CUBIC
    ended = KEEP if d == KEEP and o["trial_keep"] else REVERT if d == REVERT and o["revert_effect"] else ""
    kind = _kind(d, o)
    return {
        "pop": r.pop, "prefix": r.prefix, "decision": d, "algorithm": algorithm, "selected_since": selected_since,
        "cooldown_until": cooldown if cooldown > now else 0, "trial_since": trial_since, "trial_ended": ended,
        "new": d == SELECT or (d == TRIAL and o["new_trial"]), "holdout": int(o["holdout"]),
        "last_seen": o["last_seen"], "kind": kind, "written": o["scored"] or d != SKIP or cooldown > now,
    }  # fmt: skip


#: the kinds of reason compared: (kind, test of the reason text)
KINDS: dict[str, Callable[[str, Any], bool]] = {
    "pin": lambda text, pin: text == pin_reason(pin),
    "deny beats pin": lambda text, _: text.endswith("not applied: the deny list wins"),
    "over cap": lambda text, _: text.startswith("over cap: "),
    "denied": lambda text, _: text.startswith("denied: "),
    "other": lambda text, _: True,
}


def _kind(d: str, o: dict[str, Any]) -> tuple[str, Any]:
    if d == PIN:
        return ("pin", o["pin"])
    if o["unapplied_pin"] is not None and o["pin"] is None:
        return ("deny beats pin", None)
    if d == REVERT and o["over_cap"] and not o["denied"]:
        return ("over cap", None)
    if o["denied"] and d in (REVERT, SKIP):
        return ("denied", None)
    return ("other", None)
