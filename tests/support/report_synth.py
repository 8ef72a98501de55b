"""A synthetic dyncc dataset with known shape, for the report and view tests.

Two POPs, `HOURS` hours of raw tcpinfo polls (one socket per prefix per
minute, each polled twice) and of access-log requests (one qualifying 1 MB
response per prefix per minute, plus a small one and a 404 that do not count),
a config version at `T_SELECT` that moves the treated slow prefixes to BBR
(their delivery rate and goodput step up), one holdout prefix per POP that
stays slow, selections rounds every 15 minutes, and one rejected config
version that must not be drawn.  At `COHORT` a second, unaffected cohort
enters its groups (lax: a treated prefix, ord: a holdout) and an ord prefix
selected at `LATE` is reverted with a decision's reason text.

`insert_fleet` is a larger, randomised dataset of the same kind (many prefixes
per POP, a share of them treated or holdout, a known BBR effect on the treated
and reverts), for the report's many-prefix tests and its build-time
measurement.

`insert_trials` is the effect model's dataset (controller/evidence): rounds every
`TRIAL_ROUND_S` seconds, each selected prefix running a trial of switchback blocks whose
arms come from controller/evidence/trial.py; its tcpinfo rows carry the arm's `cc` and the
selections rows the trial (decision 'trial', algorithm = the arm), ending
kept, reverted, still running, or kept and later reverted for lack of traffic; the rows that
belong to a trial also go to trial_rounds (010) with the trial's start and stored effect.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controller.store import Store

HOURS = 3
# Recent times: the tables have TTLs (30 days raw) that would drop old synthetic rows on chDB.
T0 = dt.datetime.now(dt.UTC).replace(tzinfo=None, minute=0, second=0, microsecond=0) - dt.timedelta(hours=HOURS + 2)
T_SELECT = T0 + dt.timedelta(hours=1, minutes=30)
POPS = ("lax", "ord")
PREFIXES_PER_POP = 8
SLOW = (0, 1, 2)  # consistently slow prefixes (index within the POP)
TREATED = (0, 1)  # selected for BBR at T_SELECT
HOLDOUT = (2,)  # slow, kept on CUBIC as the control group
LATE_SELECT = 3  # lax only: selected one round later (a second "new" bar)
SMALL_EVERY = 4  # every 4th minute the flow is small (< 100 KB): not qualifying
LATE = T_SELECT + dt.timedelta(minutes=30)
COHORT = T0 + dt.timedelta(hours=2, minutes=15)  # a later round: a second cohort, and a revert
COHORT_PREFIX = 4  # lax: treated at COHORT; ord: holdout at COHORT (both fast, unaffected)
REVERTED = 5  # ord only: selected at LATE, reverted at COHORT
REVERT_REASON = "negative effect: low rate 84.00 Mbit/s -> 67.20 Mbit/s (x0.80, holdout x1.00); cooldown 24.0 h"
HTTP_BYTES = 1_048_931  # a 1 MB object with its headers


def prefix_of(pop_index: int, i: int) -> str:
    if i == PREFIXES_PER_POP - 1:
        return f"2001:db8:{pop_index}{i:02x}::/56"
    return f"198.{51 + pop_index}.{i}.0/24"


@dataclass
class Synth:
    buckets: int  # 5-minute buckets with qualifying data per POP
    tcpinfo_rows: int
    rounds: list[dt.datetime] = field(default_factory=list)
    new_per_round: dict[tuple[str, dt.datetime], int] = field(default_factory=dict)
    published: dict[str, list[dt.datetime]] = field(default_factory=dict)
    http_rows: int = 0


def rate_for(i: int, minute_time: dt.datetime) -> float:
    """Delivery rate (bytes/s) of prefix i at a time: slow ones ~1 MB/s, treated ones 3 MB/s after."""
    if i in SLOW:
        return 3_000_000.0 if i in TREATED and minute_time >= T_SELECT else 1_000_000.0
    return 10_000_000.0 + 100_000.0 * i


def insert(store: Store, http: bool = True) -> Synth:
    """The dataset of the module docstring; `http=False` leaves http_requests empty."""
    rng = np.random.default_rng(7)
    minutes = HOURS * 60
    cols: dict[str, list] = {
        k: []
        for k in (
            "time",
            "time_ns",
            "pop",
            "host",
            "prefix",
            "family",
            "cc",
            "cookie",
            "bytes_acked",
            "delivery_rate",
            "min_rtt",
            "busy_time",
            "bytes_sent",
            "bytes_retrans",
        )
    }
    cookie = 1
    for p, pop in enumerate(POPS):
        for i in range(PREFIXES_PER_POP):
            prefix = prefix_of(p, i)
            for m in range(minutes):
                t = T0 + dt.timedelta(minutes=m)
                rate = rate_for(i, t) * float(rng.uniform(0.9, 1.1))
                final_acked = 50_000 if m % SMALL_EVERY == SMALL_EVERY - 1 else 600_000 + 1000 * i
                on_bbr = i in TREATED and t >= T_SELECT
                for k, frac in ((0, 0.5), (1, 1.0)):
                    acked = int(final_acked * frac)
                    ts = t + dt.timedelta(seconds=10 + 20 * k)
                    cols["time"].append(np.datetime64(ts, "s"))
                    cols["time_ns"].append(int(ts.replace(tzinfo=dt.UTC).timestamp()) * 1_000_000_000)
                    cols["pop"].append(pop)
                    cols["host"].append(f"{pop}-edge1")
                    cols["prefix"].append(prefix)
                    cols["family"].append(10 if ":" in prefix else 2)
                    cols["cc"].append("bbr" if on_bbr else "cubic")
                    cols["cookie"].append(cookie)
                    cols["bytes_acked"].append(acked)
                    cols["delivery_rate"].append(int(rate))
                    cols["min_rtt"].append(40_000)
                    cols["busy_time"].append(int(acked / rate * 1e6) + 1)
                    cols["bytes_sent"].append(acked)
                    cols["bytes_retrans"].append(0)
                cookie += 1
    arrays: dict[str, Any] = {
        "time": np.array(cols["time"], dtype="datetime64[s]"),
        "time_ns": np.array(cols["time_ns"], dtype=np.uint64),
        "pop": cols["pop"],
        "host": cols["host"],
        "prefix": cols["prefix"],
        "family": np.array(cols["family"], dtype=np.uint8),
        "cc": cols["cc"],
        "cookie": np.array(cols["cookie"], dtype=np.uint64),
        "bytes_acked": np.array(cols["bytes_acked"], dtype=np.uint64),
        "delivery_rate": np.array(cols["delivery_rate"], dtype=np.uint64),
        "min_rtt": np.array(cols["min_rtt"], dtype=np.uint32),
        "busy_time": np.array(cols["busy_time"], dtype=np.uint64),
        "bytes_sent": np.array(cols["bytes_sent"], dtype=np.uint64),
        "bytes_retrans": np.array(cols["bytes_retrans"], dtype=np.uint64),
    }
    rows = store.insert_columns("tcpinfo", arrays)
    synth = Synth(buckets=minutes // 5, tcpinfo_rows=rows)
    synth.http_rows = _insert_http(store, rng) if http else 0
    _insert_selections(store, synth)
    _insert_configs(store, synth)
    return synth


def _insert_http(store: Store, rng: np.random.Generator) -> int:
    """Per prefix and minute: one 1 MB response (goodput ~ the prefix's rate, ending at :40),
    one small response and one 404, which the goodput leaves out."""
    requests = []
    for p, pop in enumerate(POPS):
        for i in range(PREFIXES_PER_POP):
            prefix = prefix_of(p, i)
            for m in range(HOURS * 60):
                t = T0 + dt.timedelta(minutes=m)
                goodput = rate_for(i, t) * 0.8 * float(rng.uniform(0.9, 1.1))
                end = t + dt.timedelta(seconds=40, milliseconds=250)
                requests.append(HttpRequest(end, pop, prefix, 200, HTTP_BYTES, HTTP_BYTES / goodput))
                requests.append(HttpRequest(end, pop, prefix, 200, 50_000, 0.05))
                requests.append(HttpRequest(end, pop, prefix, 404, 2_000_000, 0.5))
    return insert_http(store, requests)


@dataclass(frozen=True)
class HttpRequest:
    end: dt.datetime  # naive UTC, with milliseconds
    pop: str
    prefix: str
    status: int
    bytes_sent: int
    request_time: float  # seconds


def insert_http(store: Store, requests: list[HttpRequest]) -> int:
    """Insert access-log rows into http_requests (the columns the report reads, plus a line id)."""
    n = len(requests)
    return store.insert_columns(
        "http_requests",
        {
            "time": np.array(
                [np.datetime64(r.end.replace(microsecond=0), "s") for r in requests], dtype="datetime64[s]"
            ),
            "time_ms": np.array([r.end.microsecond // 1000 for r in requests], dtype=np.uint16),
            "pop": [r.pop for r in requests],
            "host": [f"{r.pop}-edge1" for r in requests],
            "prefix": [r.prefix for r in requests],
            "family": np.array([10 if ":" in r.prefix else 2 for r in requests], dtype=np.uint8),
            "client": [r.prefix.split("/")[0] for r in requests],
            "status": np.array([r.status for r in requests], dtype=np.uint16),
            "bytes_sent": np.array([r.bytes_sent for r in requests], dtype=np.uint64),
            "body_bytes": np.array([max(0, r.bytes_sent - 355) for r in requests], dtype=np.uint64),
            "request_time": np.array([r.request_time for r in requests], dtype=np.float64),
            "method": ["GET"] * n,
            "uri": ["/obj/1m.bin"] * n,
            "offset": np.arange(n, dtype=np.uint64),
        },
    )


def _insert_selections(store: Store, synth: Synth) -> None:
    sel: dict[str, list] = {
        k: []
        for k in (
            "round_id",
            "round_time",
            "pop",
            "prefix",
            "family",
            "duty_cycle",
            "flap_ratio",
            "decision",
        )
    }
    t = T0 + dt.timedelta(hours=1)
    end = T0 + dt.timedelta(hours=HOURS)
    late = LATE
    reason: list[str] = []
    effect: list[float] = []
    while t < end:
        synth.rounds.append(t)
        for p, pop in enumerate(POPS):
            new = 0
            for i in range(PREFIXES_PER_POP):
                if i in TREATED:
                    decision = "select" if t == T_SELECT else ("keep" if t > T_SELECT else "skip")
                elif i in HOLDOUT:
                    decision = "holdout" if t >= T_SELECT else "skip"
                elif i == LATE_SELECT and pop == "lax":
                    decision = "select" if t == late else ("keep" if t > late else "skip")
                elif i == COHORT_PREFIX:
                    decision = ("select" if pop == "lax" else "holdout") if t == COHORT else "skip"
                    if pop == "lax" and t > COHORT:
                        decision = "keep"
                    if pop == "ord" and t > COHORT:
                        decision = "holdout"
                elif i == REVERTED and pop == "ord":
                    decision = "select" if t == late else ("keep" if late < t < COHORT else "skip")
                    decision = "revert" if t == COHORT else decision
                else:
                    decision = "skip"
                new += decision == "select"
                reason.append(REVERT_REASON if decision == "revert" else "")
                effect.append(0.8 if decision == "revert" else float("nan"))
                sel["round_id"].append(f"r{t:%H%M}")
                sel["round_time"].append(np.datetime64(t, "s"))
                sel["pop"].append(pop)
                sel["prefix"].append(prefix_of(p, i))
                sel["family"].append(10 if i == PREFIXES_PER_POP - 1 else 2)
                sel["duty_cycle"].append(0.9 if i in SLOW else 0.0)
                sel["flap_ratio"].append(0.05)
                sel["decision"].append(decision)
            synth.new_per_round[(pop, t)] = new
        t += dt.timedelta(minutes=15)
    store.insert_columns(
        "selections",
        {
            "round_id": sel["round_id"],
            "round_time": np.array(sel["round_time"], dtype="datetime64[s]"),
            "pop": sel["pop"],
            "prefix": sel["prefix"],
            "family": np.array(sel["family"], dtype=np.uint8),
            "duty_cycle": np.array(sel["duty_cycle"], dtype=np.float64),
            "flap_ratio": np.array(sel["flap_ratio"], dtype=np.float64),
            "decision": sel["decision"],
            "reason": reason,
            "effect": np.array(effect, dtype=np.float64),
            "holdout_effect": np.where(np.isfinite(effect), 1.0, np.nan),
            "baseline_low_rate": np.where(np.isfinite(effect), 10_500_000.0, np.nan),
            "low_delivery_rate": np.where(np.isfinite(effect), 8_400_000.0, 0.0),
        },
    )
    # every round was published (controller/scoring/state.py: reports count only such rounds)
    rounds = [(f"r{t:%H%M}", t, pop) for t in synth.rounds for pop in POPS]
    store.insert_columns(
        "round_outcomes",
        {
            "round_id": [r[0] for r in rounds],
            "round_time": np.array([np.datetime64(r[1], "s") for r in rounds], dtype="datetime64[s]"),
            "pop": [r[2] for r in rounds],
            "status": ["published"] * len(rounds),
        },
    )


def _insert_configs(store: Store, synth: Synth) -> None:
    one = dt.timedelta(minutes=1)
    late = LATE
    rows = [
        (T_SELECT + one, "lax", 1, "published", 2),
        (T_SELECT + one, "ord", 1, "published", 2),
        (late + one, "lax", 2, "published", 3),
        (late + 2 * one, "ord", 2, "rejected", 9),
    ]
    for created, pop, _, status, _ in rows:
        if status == "published":
            synth.published.setdefault(pop, []).append(created)
    store.insert_columns(
        "config_versions",
        {
            "created_at": np.array([r[0] for r in rows], dtype="datetime64[s]"),
            "pop": [r[1] for r in rows],
            "version": np.array([r[2] for r in rows], dtype=np.uint64),
            "status": [r[3] for r in rows],
            "entries": np.array([r[4] for r in rows], dtype=np.uint32),
            "kill_switch": np.zeros(len(rows), dtype=np.uint8),
        },
    )


# ---- the fleet: many prefixes per POP, a known BBR effect, reverts

FLEET_EFFECT = 1.5  # treated prefixes' rate multiplier from the round they were selected
FLEET_REVERTED_EFFECT = 0.8  # the treated prefixes that got worse (and were reverted)
FLEET_DRIFT = 0.9  # every prefix's rate from T_SELECT on: a time effect the DiD must remove
FLEET_ASN_FIRST = 64496  # documentation ASNs 64496..64511, one per /48 block of client prefixes


@dataclass
class Fleet:
    prefixes: dict[str, list[str]]  # per POP, index order
    treated: dict[str, dict[str, dt.datetime]]  # per POP: prefix -> the round it was selected
    holdout: dict[str, dict[str, dt.datetime]]
    reverted: dict[str, dict[str, dt.datetime]]  # per POP: prefix -> the round it was reverted
    multiplier: dict[tuple[str, str], float]  # (pop, prefix) -> BBR's rate multiplier (1 if none)
    tcpinfo_rows: int = 0
    http_rows: int = 0
    rounds: list[dt.datetime] = field(default_factory=list)

    def expected_did(self, pops: tuple[str, ...] = POPS) -> float:
        """exp(mean ln m over treated - mean ln m over holdout) - 1: the effect the data hold."""
        t = [math.log(self.multiplier[(p, x)]) for p in pops for x in self.treated[p]]
        h = [math.log(self.multiplier[(p, x)]) for p in pops for x in self.holdout[p]]
        return math.exp(sum(t) / len(t) - sum(h) / len(h)) - 1


def fleet_prefix(pop_index: int, i: int) -> str:
    """Index 0 of each POP is one of the lab's two IPv4 /24s; the rest IPv6 /56s, 16 per /48."""
    if i == 0:
        return ("198.51.100.0/24", "203.0.113.0/24")[pop_index % 2]
    block = pop_index * 64 + i // 16
    return str(ipaddress.ip_network(f"2001:db8:{block:x}:{(i % 16) << 8:x}::/56"))


def fleet_asn_csv(prefixes_per_pop: int, pops: int = len(POPS)) -> str:
    """The prefix->ASN file the lab writes: one /48 per 16 client prefixes (a /24 for the IPv4
    ones), documentation ASNs 64496..64511 in turn, a header line and a comment."""
    lines = ["# prefix -> ASN of the lab's client prefixes (documentation ASNs)", "prefix,asn,name"]
    blocks = sorted({p * 64 + i // 16 for p in range(pops) for i in range(1, prefixes_per_pop)})
    for k, block in enumerate(blocks):
        asn = FLEET_ASN_FIRST + k % 16
        lines.append(f"2001:db8:{block:x}::/48,AS{asn},Lab ISP {asn - FLEET_ASN_FIRST}")
    lines += ["198.51.100.0/24,64496,Lab ISP 0", "203.0.113.0/24,64497,Lab ISP 1"]
    return "\n".join(lines) + "\n"


def insert_fleet(store: Store, prefixes_per_pop: int = 120, seed: int = 11) -> Fleet:
    """`prefixes_per_pop` prefixes per POP over HOURS hours (polls and requests as insert()).

    The slowest 30 % are candidates: at T_SELECT two thirds of the first 24 % are treated, a
    third held out; at COHORT the rest of the candidates enter (the same split).  A sixth of the
    treated get worse on BBR (FLEET_REVERTED_EFFECT) and are reverted two rounds after COHORT,
    the others improve by FLEET_EFFECT.  Every rate drifts by FLEET_DRIFT from T_SELECT on.
    """
    rng = np.random.default_rng(seed)
    n = prefixes_per_pop
    minutes = HOURS * 60
    revert_at = COHORT + dt.timedelta(minutes=30)
    fleet = Fleet({}, {}, {}, {}, {})
    for p, pop in enumerate(POPS):
        prefixes = [fleet_prefix(p, i) for i in range(n)]
        fleet.prefixes[pop] = prefixes
        fleet.treated[pop], fleet.holdout[pop], fleet.reverted[pop] = {}, {}, {}
        candidates = int(n * 0.3)
        first = int(n * 0.24)
        for i in range(candidates):
            t0 = T_SELECT if i < first else COHORT
            if i % 3 == 2:
                fleet.holdout[pop][prefixes[i]] = t0
                fleet.multiplier[(pop, prefixes[i])] = 1.0
                continue
            fleet.treated[pop][prefixes[i]] = t0
            if i % 12 == 0 and t0 == T_SELECT:
                fleet.reverted[pop][prefixes[i]] = revert_at
                fleet.multiplier[(pop, prefixes[i])] = FLEET_REVERTED_EFFECT
            else:
                fleet.multiplier[(pop, prefixes[i])] = FLEET_EFFECT
        for i in range(candidates, n):
            fleet.multiplier[(pop, prefixes[i])] = 1.0

    # per (pop, prefix, minute): the rate; two polls per minute, one qualifying request
    times = np.array([np.datetime64(T0 + dt.timedelta(minutes=m), "s") for m in range(minutes)])
    t_select = np.datetime64(T_SELECT, "s")
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("pop", "prefix", "time", "rate", "cc")}
    for pop in POPS:
        for i, prefix in enumerate(fleet.prefixes[pop]):
            base = (1.5e6 if i < int(n * 0.3) else 8e6) * float(rng.lognormal(0.0, 0.3))
            rate = base * rng.uniform(0.7, 1.3, minutes) * np.where(times >= t_select, FLEET_DRIFT, 1.0)
            selected = fleet.treated[pop].get(prefix)
            on = np.zeros(minutes, dtype=bool)
            if selected is not None:
                on = times >= np.datetime64(selected, "s")
                rate = rate * np.where(on, fleet.multiplier[(pop, prefix)], 1.0)
                if prefix in fleet.reverted[pop]:  # back on CUBIC, but the path stays worse
                    on &= times < np.datetime64(fleet.reverted[pop][prefix], "s")
            cols["pop"].append(np.full(minutes, pop, dtype=object))
            cols["prefix"].append(np.full(minutes, prefix, dtype=object))
            cols["time"].append(times)
            cols["rate"].append(rate)
            cols["cc"].append(np.where(on, "bbr", "cubic").astype(object))
    pop_c, prefix_c, time_c, rate_c, cc_c = (np.concatenate(cols[k]) for k in ("pop", "prefix", "time", "rate", "cc"))
    rows = len(time_c)
    acked = np.full(rows, 600_000, dtype=np.uint64)
    polls: dict[str, list[np.ndarray]] = {k: [] for k in ("time", "acked")}
    for k, frac in ((0, 0.5), (1, 1.0)):
        polls["time"].append(time_c + np.timedelta64(10 + 20 * k, "s"))
        polls["acked"].append((acked * frac).astype(np.uint64))
    poll_time = np.concatenate(polls["time"])
    poll_acked = np.concatenate(polls["acked"])
    two = lambda a: np.concatenate([a, a])  # noqa: E731 - the same column for both polls
    rate2 = two(rate_c)
    fleet.tcpinfo_rows = store.insert_columns(
        "tcpinfo",
        {
            "time": poll_time.astype("datetime64[s]"),
            "time_ns": poll_time.astype("datetime64[s]").astype(np.int64).astype(np.uint64) * np.uint64(1_000_000_000),
            "pop": list(two(pop_c)),
            "host": [f"{x}-edge1" for x in two(pop_c)],
            "prefix": list(two(prefix_c)),
            "family": np.array([10 if ":" in x else 2 for x in two(prefix_c)], dtype=np.uint8),
            "cc": list(two(cc_c)),
            "cookie": two(np.arange(1, rows + 1, dtype=np.uint64)),
            "bytes_acked": poll_acked,
            "delivery_rate": rate2.astype(np.uint64),
            "min_rtt": np.full(2 * rows, 40_000, dtype=np.uint32),
            "busy_time": (poll_acked / rate2 * 1e6).astype(np.uint64) + np.uint64(1),
            "bytes_sent": poll_acked,
            "bytes_retrans": np.zeros(2 * rows, dtype=np.uint64),
        },
    )
    goodput = rate_c * 0.8 * rng.uniform(0.9, 1.1, rows)
    end = time_c.astype("datetime64[ms]") + np.timedelta64(40_250, "ms")
    fleet.http_rows = insert_http(
        store,
        [
            HttpRequest(e.astype(dt.datetime), str(pop), str(prefix), 200, HTTP_BYTES, HTTP_BYTES / g)
            for e, pop, prefix, g in zip(end, pop_c, prefix_c, goodput, strict=True)
        ],
    )
    _insert_fleet_rounds(store, fleet, revert_at)
    one = dt.timedelta(minutes=1)
    configs = [(t + one, pop, v + 1) for pop in POPS for v, t in enumerate((T_SELECT, COHORT, revert_at))]
    store.insert_columns(
        "config_versions",
        {
            "created_at": np.array([np.datetime64(c[0], "s") for c in configs], dtype="datetime64[s]"),
            "pop": [c[1] for c in configs],
            "version": np.array([c[2] for c in configs], dtype=np.uint64),
            "status": ["published"] * len(configs),
            "entries": np.full(len(configs), 10, dtype=np.uint32),
            "kill_switch": np.zeros(len(configs), dtype=np.uint8),
        },
    )
    return fleet


def _insert_fleet_rounds(store: Store, fleet: Fleet, revert_at: dt.datetime) -> None:
    cols: dict[str, list] = {k: [] for k in ("round_id", "round_time", "pop", "prefix", "decision", "reason", "effect")}
    t = T0 + dt.timedelta(hours=1)
    while t < T0 + dt.timedelta(hours=HOURS):
        fleet.rounds.append(t)
        for pop in POPS:
            for prefix in fleet.prefixes[pop]:
                t_treat, t_hold = fleet.treated[pop].get(prefix), fleet.holdout[pop].get(prefix)
                t_rev = fleet.reverted[pop].get(prefix)
                decision, reason, effect = "skip", "", math.nan
                if t_treat is not None and t >= t_treat:
                    decision = "select" if t == t_treat else "keep"
                    if t_rev is not None and t >= t_rev:
                        decision = "revert" if t == t_rev else "skip"
                elif t_hold is not None and t >= t_hold:
                    decision = "holdout"
                if decision == "revert":
                    effect = FLEET_REVERTED_EFFECT
                    reason = f"negative effect: low rate (x{effect:.2f}, holdout x1.00); cooldown 24.0 h"
                for k, v in (("round_id", f"f{t:%H%M}"), ("round_time", np.datetime64(t, "s")), ("pop", pop)):
                    cols[k].append(v)
                cols["prefix"].append(prefix)
                cols["decision"].append(decision)
                cols["reason"].append(reason)
                cols["effect"].append(effect)
        t += dt.timedelta(minutes=15)
    effects = np.array(cols["effect"], dtype=np.float64)
    store.insert_columns(
        "selections",
        {
            "round_id": cols["round_id"],
            "round_time": np.array(cols["round_time"], dtype="datetime64[s]"),
            "pop": cols["pop"],
            "prefix": cols["prefix"],
            "family": np.array([10 if ":" in x else 2 for x in cols["prefix"]], dtype=np.uint8),
            "decision": cols["decision"],
            "reason": cols["reason"],
            "effect": effects,
            "holdout_effect": np.where(np.isfinite(effects), 1.0, np.nan),
            "baseline_low_rate": np.where(np.isfinite(effects), 1_500_000.0, np.nan),
            "low_delivery_rate": np.where(np.isfinite(effects), 1_200_000.0, 0.0),
        },
    )
    rounds = [(f"f{t:%H%M}", t, pop) for t in fleet.rounds for pop in POPS]
    store.insert_columns(
        "round_outcomes",
        {
            "round_id": [r[0] for r in rounds],
            "round_time": np.array([np.datetime64(r[1], "s") for r in rounds], dtype="datetime64[s]"),
            "pop": [r[2] for r in rounds],
            "status": ["published"] * len(rounds),
        },
    )


@dataclass(frozen=True)
class Decision:
    """One selections row (the columns the report reads)."""

    round_time: dt.datetime
    pop: str
    prefix: str
    decision: str
    round_id: str = ""  # default: r<HHMMSS> of round_time
    reason: str = ""
    effect: float = math.nan
    holdout_effect: float = math.nan
    baseline_low_rate: float = math.nan
    low_delivery_rate: float = 0.0
    algorithm: str = ""  # default: bbr for select / keep, cubic otherwise
    trial_since: dt.datetime | None = None  # set: the row belongs to a trial (a trial_rounds row)
    trial_effect: float = math.nan
    trial_low: float = math.nan
    trial_high: float = math.nan

    @property
    def rid(self) -> str:
        return self.round_id or f"r{self.round_time:%H%M%S}"


EPOCH = dt.datetime(1970, 1, 1)


def algorithm(d: Decision) -> str:
    return d.algorithm or ("bbr" if d.decision in ("select", "keep") else "cubic")


def selected_since(d: Decision) -> dt.datetime:
    return d.trial_since if d.decision == "trial" and d.trial_since else EPOCH


def insert_decisions(store: Store, decisions: list[Decision], status: dict[str, str] | None = None) -> None:
    """selections rows, trial_rounds rows for the decisions with a `trial_since`, and one
    round_outcomes row per (pop, round): `status` by round id (default published)."""
    store.insert_columns(
        "selections",
        {
            "round_id": [d.rid for d in decisions],
            "round_time": np.array([np.datetime64(d.round_time, "s") for d in decisions], dtype="datetime64[s]"),
            "pop": [d.pop for d in decisions],
            "prefix": [d.prefix for d in decisions],
            "family": np.array([10 if ":" in d.prefix else 2 for d in decisions], dtype=np.uint8),
            "decision": [d.decision for d in decisions],
            "reason": [d.reason for d in decisions],
            "effect": np.array([d.effect for d in decisions], dtype=np.float64),
            "holdout_effect": np.array([d.holdout_effect for d in decisions], dtype=np.float64),
            "baseline_low_rate": np.array([d.baseline_low_rate for d in decisions], dtype=np.float64),
            "low_delivery_rate": np.array([d.low_delivery_rate for d in decisions], dtype=np.float64),
            "algorithm": [algorithm(d) for d in decisions],
            # a trial's row carries the trial's start as selected_since (controller/scoring/decide.py)
            "selected_since": np.array([np.datetime64(selected_since(d), "s") for d in decisions], "datetime64[s]"),
        },
    )
    # the rows that belong to a trial (in it, kept by it, reverted by it): table trial_rounds (010)
    trial = [d for d in decisions if d.trial_since is not None]
    if trial:
        store.insert_columns(
            "trial_rounds",
            {
                "round_id": [d.rid for d in trial],
                "round_time": np.array([np.datetime64(d.round_time, "s") for d in trial], dtype="datetime64[s]"),
                "pop": [d.pop for d in trial],
                "prefix": [d.prefix for d in trial],
                "decision": [d.decision for d in trial],
                "algorithm": [algorithm(d) for d in trial],
                "reason": [d.reason for d in trial],
                "trial_since": np.array([np.datetime64(d.trial_since, "s") for d in trial], dtype="datetime64[s]"),
                "trial_effect": np.array([d.trial_effect for d in trial], dtype=np.float64),
                "trial_low": np.array([d.trial_low for d in trial], dtype=np.float64),
                "trial_high": np.array([d.trial_high for d in trial], dtype=np.float64),
            },
        )
    rounds = sorted({(d.rid, d.round_time, d.pop) for d in decisions})
    store.insert_columns(
        "round_outcomes",
        {
            "round_id": [r[0] for r in rounds],
            "round_time": np.array([np.datetime64(r[1], "s") for r in rounds], dtype="datetime64[s]"),
            "pop": [r[2] for r in rounds],
            "status": [(status or {}).get(r[0], "published") for r in rounds],
        },
    )


# ---- trials: the effect model's dataset

TRIAL_ROUND_S = 30  # round spacing: the bucket length the trials are judged on (not the report's auto 60 s)
TRIAL_MINUTES = 60  # telemetry span from T0
TRIAL_FIRST_ROUND = T0 + dt.timedelta(minutes=5)
TRIAL_POLL_S = 5  # one qualifying socket poll per prefix every 5 s: 6 per bucket
TRIAL_APP_LIMITED_EVERY = 6  # every 6th poll is app-limited (and slow): left out of the effect
TRIAL_BLOCKS = 8  # rounds of an ended trial (EvidenceSettings's default trial_blocks, 1 round per block)
TRIAL_RUNNING_ROUNDS = 6
TRIAL_EXPIRE_AFTER = 10  # kept-then-expired: reverted (no traffic) this many rounds after the keep
#: kind -> BBR's rate multiplier; a prefix's kind is KINDS[i % 4]
TRIAL_KINDS = {"kept": 1.5, "reverted": 0.7, "running": 1.2, "expired": 1.4}
KINDS = tuple(TRIAL_KINDS)


@dataclass
class Trials:
    prefixes: dict[str, list[str]]  # per POP, index order (trial prefixes)
    holdout: dict[str, str]  # per POP: the one holdout prefix
    kind: dict[tuple[str, str], str]  # (pop, prefix) -> a TRIAL_KINDS key
    since: dict[tuple[str, str], dt.datetime]  # trial start
    base: dict[tuple[str, str], float] = field(default_factory=dict)  # CUBIC rate (bytes/s) before noise
    rounds: list[dt.datetime] = field(default_factory=list)
    tcpinfo_rows: int = 0
    http_rows: int = 0
    app_limited: int = 0  # qualifying polls flagged app-limited
    qualifying: int = 0  # qualifying polls in all (app-limited included) of the trial prefixes

    @property
    def end(self) -> dt.datetime:
        return T0 + dt.timedelta(minutes=TRIAL_MINUTES)

    def in_force(self) -> set[tuple[str, str]]:
        return {k for k, v in self.kind.items() if v == "kept"}


def trial_prefix(pop_index: int, i: int) -> str:
    return str(ipaddress.ip_network(f"2001:db8:{0x100 + pop_index:x}:{i << 8:x}::/56"))


def _trial_schedule(trials: Trials, pop: str, prefix: str) -> dict[dt.datetime, tuple[str, str, str]]:
    """round time -> (decision, algorithm, reason) of one prefix's rows."""
    from controller.evidence.settings import EvidenceSettings
    from controller.evidence.trial import arm_at

    cfg = EvidenceSettings()
    step = dt.timedelta(seconds=TRIAL_ROUND_S)
    kind = trials.kind[(pop, prefix)]
    since = trials.since[(pop, prefix)]
    t_since = int(since.replace(tzinfo=dt.UTC).timestamp())
    out: dict[dt.datetime, tuple[str, str, str]] = {}
    length = TRIAL_RUNNING_ROUNDS if kind == "running" else TRIAL_BLOCKS
    for k in range(length):
        arm = arm_at(pop, prefix, t_since, k, cfg)
        why = "selected; trial starts, first block " + arm if k == 0 else f"trial block {k + 1} of at most 8"
        out[since + k * step] = ("trial", arm, why)
    if kind == "running":
        return out
    end = since + TRIAL_BLOCKS * step
    if kind == "reverted":
        out[end] = ("revert", "cubic", f"trial reverted after {TRIAL_BLOCKS} blocks: synthetic {pop} {prefix}")
        return out
    out[end] = ("keep", "bbr", f"trial kept after {TRIAL_BLOCKS} blocks: synthetic {pop} {prefix}")
    t = end + step
    stop = end + TRIAL_EXPIRE_AFTER * step if kind == "expired" else trials.end
    while t < min(stop, trials.end):
        out[t] = ("keep", "bbr", "kept by its trial")
        t += step
    if kind == "expired" and stop < trials.end:
        out[stop] = ("revert", "cubic", "no traffic for the expiry time")
    return out


def insert_trials(store: Store, prefixes_per_pop: int = 8, seed: int = 5, http: bool = True) -> Trials:
    """Trial prefixes (kinds in turn: kept, reverted, running, expired) and one holdout per POP.

    Ended trials start 5 to 41 minutes after T0 (staggered by index), running ones 6 rounds
    before the end.  Every 5 s each trial prefix has a qualifying poll (every 6th app-limited, at
    a third of the rate) and every bucket one 1 MB request; a socket's `cc` is its round's arm
    (bbr after a keep, cubic before the trial and after a revert), and on bbr its rate is the
    kind's multiplier times the prefix's base rate (lognormal noise of 10 % on every poll).
    """
    rng = np.random.default_rng(seed)
    step = dt.timedelta(seconds=TRIAL_ROUND_S)
    trials = Trials({}, {}, {}, {})
    for p, pop in enumerate(POPS):
        trials.prefixes[pop] = [trial_prefix(p, i) for i in range(prefixes_per_pop)]
        trials.holdout[pop] = trial_prefix(p, prefixes_per_pop)
        for i, prefix in enumerate(trials.prefixes[pop]):
            kind = KINDS[i % len(KINDS)]
            trials.kind[(pop, prefix)] = kind
            if kind == "running":
                trials.since[(pop, prefix)] = trials.end - TRIAL_RUNNING_ROUNDS * step
            else:
                trials.since[(pop, prefix)] = TRIAL_FIRST_ROUND + dt.timedelta(minutes=5 + (i // 4) % 36)
    t = TRIAL_FIRST_ROUND
    while t < trials.end:
        trials.rounds.append(t)
        t += step
    schedules = {key: _trial_schedule(trials, *key) for key in trials.kind}

    polls = TRIAL_MINUTES * 60 // TRIAL_POLL_S
    times = np.array([np.datetime64(T0, "s") + np.timedelta64(TRIAL_POLL_S * k + 2, "s") for k in range(polls)])
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("pop", "prefix", "time", "rate", "cc", "app")}
    requests: list[HttpRequest] = []
    round_times = np.array([np.datetime64(r, "s") for r in trials.rounds])
    for pop in POPS:
        for prefix in [*trials.prefixes[pop], trials.holdout[pop]]:
            base = 1.5e6 * float(rng.lognormal(0.0, 0.3))
            trials.base[(pop, prefix)] = base
            cc = np.full(polls, "cubic", dtype=object)
            schedule = schedules.get((pop, prefix), {})
            if schedule:  # each poll runs the arm of the latest round before it (cubic outside the rows)
                idx = np.searchsorted(round_times, times, side="right") - 1
                arms = np.array([schedule.get(r, ("", "cubic", ""))[1] for r in trials.rounds], dtype=object)
                on = idx >= 0
                cc[on] = arms[idx[on]]
            mult = TRIAL_KINDS.get(trials.kind.get((pop, prefix), ""), 1.0)
            rate = base * rng.lognormal(0.0, 0.1, polls) * np.where(cc == "bbr", mult, 1.0)
            app = (np.arange(polls) % TRIAL_APP_LIMITED_EVERY) == TRIAL_APP_LIMITED_EVERY - 1
            rate = np.where(app, rate / 3, rate)
            for c, v in (("pop", pop), ("prefix", prefix)):
                cols[c].append(np.full(polls, v, dtype=object))
            cols["time"].append(times)
            cols["rate"].append(rate)
            cols["cc"].append(cc)
            cols["app"].append(app)
            if (pop, prefix) in trials.kind:
                trials.app_limited += int(app.sum())
                trials.qualifying += polls
            if http:
                per_bucket = TRIAL_ROUND_S // TRIAL_POLL_S
                for b in range(polls // per_bucket):
                    k = b * per_bucket + 3  # the bucket's 4th poll: not app-limited
                    end = times[k].astype(dt.datetime) + dt.timedelta(seconds=1, milliseconds=500)
                    goodput = rate[k] * 0.8 * float(rng.uniform(0.95, 1.05))
                    requests.append(HttpRequest(end, pop, prefix, 200, HTTP_BYTES, HTTP_BYTES / goodput))
    pop_c, prefix_c, time_c, rate_c, cc_c, app_c = (
        np.concatenate(cols[k]) for k in ("pop", "prefix", "time", "rate", "cc", "app")
    )
    rows = len(time_c)
    acked = np.full(rows, 600_000, dtype=np.uint64)
    trials.tcpinfo_rows = store.insert_columns(
        "tcpinfo",
        {
            "time": time_c.astype("datetime64[s]"),
            "time_ns": time_c.astype("datetime64[s]").astype(np.int64).astype(np.uint64) * np.uint64(1_000_000_000),
            "pop": list(pop_c),
            "host": [f"{x}-edge1" for x in pop_c],
            "prefix": list(prefix_c),
            "family": np.full(rows, 10, dtype=np.uint8),
            "cc": list(cc_c),
            "cookie": np.arange(1, rows + 1, dtype=np.uint64),
            "bytes_acked": acked,
            "delivery_rate": rate_c.astype(np.uint64),
            "app_limited": app_c.astype(np.uint8),
            "min_rtt": np.full(rows, 40_000, dtype=np.uint32),
            "busy_time": (acked / rate_c * 1e6).astype(np.uint64) + np.uint64(1),
            "bytes_sent": acked,
            "bytes_retrans": np.zeros(rows, dtype=np.uint64),
        },
    )
    trials.http_rows = insert_http(store, requests) if http else 0

    decisions: list[Decision] = []
    for r in trials.rounds:
        rid = f"t{r:%H%M%S}"
        for pop in POPS:
            decisions.append(Decision(r, pop, trials.holdout[pop], "holdout", round_id=rid, reason="holdout"))
            for prefix in trials.prefixes[pop]:
                key = (pop, prefix)
                row = schedules[key].get(r)
                if row is None:
                    decisions.append(Decision(r, pop, prefix, "skip", round_id=rid, reason="not a candidate"))
                    continue
                decision, algorithm, reason = row
                since = trials.since[key] if reason != "no traffic for the expiry time" else None
                mult = TRIAL_KINDS[trials.kind[key]]
                stored = mult - 1 if decision in ("keep", "revert") else math.nan
                # a trial's revert row as decide.py writes it: the low rate now, effect = now / at
                # selection (descriptive), the baseline cleared
                measured = decision == "revert" and since is not None
                decisions.append(
                    Decision(
                        r,
                        pop,
                        prefix,
                        decision,
                        round_id=rid,
                        reason=reason,
                        algorithm=algorithm,
                        trial_since=since,
                        trial_effect=stored if since else math.nan,
                        trial_low=stored - 0.1 if since else math.nan,
                        trial_high=stored + 0.1 if since else math.nan,
                        effect=mult if measured else math.nan,
                        low_delivery_rate=trials.base[key] * mult if measured else 0.0,
                    )
                )
    insert_decisions(store, decisions)
    return trials
