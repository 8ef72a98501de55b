"""`dyncc control explain`: why a prefix got its decision, for people.

Prints which settings it used, the prefix's bucket timeline (statistic, POP threshold,
bad/good), its scores against the candidate rules, the decision a round would make now (a
dry run: nothing is written), the operator's pin of the prefix if any (controller/scoring/pins.py),
and the last decision recorded in `selections`.
`check_prefix` validates the --prefix argument (before the store is opened).

Settings (`choose_settings`): those the latest round that decided the prefix (at or before
the time explained) recorded in `round_settings` (controller/scoring/round_settings.py), so a
store written with other settings (the lab's, the demo's) is explained as its rounds scored
it; the command line's when the user gave scoring, decision or trial options, or when no
round recorded settings for the prefix.  The first line after the prefix says which.  A
prefix the store has nothing of (no decision and no telemetry in the window) is a
ConfigError (one line, exit 2), not a timeline of empty buckets.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from controller.evidence.load import Evidence, SampleRule, stored_trials
from controller.evidence.settings import EvidenceSettings
from controller.scoring.pins import load_pins, pin_reason
from controller.scoring.query import prefix_timeline, refresh, window_for
from controller.scoring.round import run_round
from controller.scoring.round_settings import SettingsUnreadable, deciding_round, recorded_settings
from controller.scoring.settings import ScoringSettings
from controller.statistics.source import Window, epoch_seconds
from controller.store.decisions import KEEP, REVERT, TRIAL
from controller.store.sql import query
from dyncc_common.errors import ConfigError
from schemas.addresses import mapped_to_ipv4

if TYPE_CHECKING:
    import pandas as pd

    from controller.store import Store


COMMAND_LINE = "settings from the command line"


@dataclass(frozen=True)
class ExplainWith:
    """The settings an explanation uses, and where they came from (the line explain prints)."""

    scoring: ScoringSettings
    evidence: EvidenceSettings | None = None
    source: str = COMMAND_LINE


def choose_settings(
    store: Store, pop: str, prefix: str, now: dt.datetime, command_line: ExplainWith, explicit: bool
) -> ExplainWith:
    """The recorded settings of the latest round at or before `now` that decided the prefix, or
    `command_line` when `explicit` (the user gave scoring options) or when there are none (the
    source then says why)."""
    if explicit:
        return command_line
    prefix = mapped_to_ipv4(prefix)
    now = now if now.tzinfo else now.replace(tzinfo=dt.UTC)
    decided = deciding_round(store, pop, prefix, now)
    if decided is None:
        why = f"no round decided {prefix} at POP {pop} by {now.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S} UTC"
        return dataclasses.replace(command_line, source=f"{command_line.source} ({why})")
    round_id, round_time = decided
    try:
        recorded = recorded_settings(store, pop, round_id)
    except SettingsUnreadable as exc:
        why = f"the settings round {round_id} recorded are not readable: {exc}"
        return dataclasses.replace(command_line, source=f"{command_line.source} ({why})")
    if recorded is None:
        why = f"round {round_id} at {round_time:%Y-%m-%d %H:%M:%S} UTC recorded no settings"
        return dataclasses.replace(command_line, source=f"{command_line.source} ({why})")
    source = f"settings of round {round_id} at {recorded.round_time:%Y-%m-%d %H:%M:%S} UTC"
    if recorded.round_time < window_for(now, recorded.scoring).start:
        # e.g. a finished lab's round (its lookback is minutes): the window at `now` holds none of its data
        at = recorded.round_time.replace(microsecond=0) + dt.timedelta(seconds=recorded.round_time.microsecond > 0)
        source += f" (older than the window: --at {at:%Y-%m-%dT%H:%M:%SZ} explains it in its own)"
    return ExplainWith(recorded.scoring, recorded.evidence, source)


def check_prefix(text: str) -> str:
    """The canonical form of a client prefix ('203.0.113.0/24', '2001:db8:0:100::/56');
    ConfigError when it is not one (no length, not an address, host bits set)."""
    value = text.strip()
    example = "e.g. 203.0.113.0/24 or 2001:db8:0:100::/56"
    if "/" not in value:
        raise ConfigError(f"bad --prefix {text!r}: give a prefix with its length, {example}")
    try:
        net = ipaddress.ip_network(value)
    except ValueError:
        try:
            wider = ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise ConfigError(f"bad --prefix {text!r}: not an IP prefix, {example}") from None
        raise ConfigError(f"bad --prefix {text!r}: host bits set, did you mean {wider}?") from None
    return str(net)


def _rate(bytes_per_s: Any) -> str:
    value = float(bytes_per_s)
    return "-" if not math.isfinite(value) else f"{value * 8 / 1e6:9.2f} Mbit/s"


def format_timeline(timeline: pd.DataFrame, start: dt.datetime, buckets: int, bucket_seconds: int) -> list[str]:
    """One line per bucket of the window; buckets without data say so.  `app-lim.`: the bucket's
    qualifying samples that are app-limited (in `qualif.` only with include_app_limited)."""
    by_bucket: dict[int, dict[Any, Any]] = {}
    for record in timeline.to_dict("records"):
        by_bucket[epoch_seconds(_as_datetime(record["bucket"]))] = dict(record)
    header = f"{'bucket (UTC)':<17} {'samples':>7} {'qualif.':>7} {'app-lim.':>8}  {'statistic':>16}  {'threshold':>16}"
    lines = [f"  {header}  state"]
    first = epoch_seconds(start)
    for i in range(buckets):
        ts = first + i * bucket_seconds
        when = dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M")
        row = by_bucket.get(ts)
        if row is None:
            lines.append(f"  {when:<17} {'0':>7} {'0':>7} {'0':>8}  {'-':>16}  {'-':>16}  no data")
            continue
        counted = bool(row["counted"])
        state = "not counted (too few qualifying samples)"
        if counted:
            state = "BAD" if bool(row["bad"]) else "good"
        lines.append(
            f"  {when:<17} {int(row['samples']):>7} {int(row['qualifying']):>7} {int(row.get('app_limited', 0)):>8}  "
            f"{_rate(row['stat']) if counted else '-':>16}  {_rate(row['threshold']):>16}  {state}"
        )
    return lines


def app_limited_line(timeline: pd.DataFrame, included: bool) -> str:
    """The window's share of qualifying samples that are app-limited, and what became of them."""
    flagged = int(timeline["app_limited"].sum()) if "app_limited" in timeline else 0
    qualifying = int(timeline["qualifying"].sum()) if "qualifying" in timeline else 0
    total = qualifying if included else qualifying + flagged
    share = f"{flagged / total:.0%}" if total else "-"
    fate = "counted (include-app-limited)" if included else "left out of the statistics"
    return f"app-limited: {flagged} of {total} qualifying samples in the window ({share}), {fate}"


def _as_datetime(value: Any) -> dt.datetime:
    import pandas as pd

    ts = pd.Timestamp(value)
    return (ts.tz_localize("UTC") if ts.tzinfo is None else ts).to_pydatetime()


def explain(
    store: Store,
    cfg: ScoringSettings,
    pop: str,
    prefix: str,
    now: dt.datetime,
    refuse: Callable[[str], str | None] | None = None,
    evidence: EvidenceSettings | None = None,
    settings_from: str = COMMAND_LINE,
) -> str:
    """The explanation text for one (pop, prefix) at `now` (refuse, evidence: as
    for run_round; `settings_from`: where the settings came from, printed).  ConfigError when the store
    has nothing of the prefix (require_known_prefix)."""
    prefix = mapped_to_ipv4(prefix)  # an IPv4 client on IPv6 sockets is its IPv4 prefix
    window = window_for(now, cfg)
    last = require_known_prefix(store, pop, prefix, window)
    rollup = "tcpinfo_5m" if cfg.include_app_limited else "tcpinfo_5m_nal"
    source = f"rollup {rollup}" if cfg.uses_rollup else f"raw tcpinfo, bytes_acked > {cfg.min_bytes}"
    out = [
        f"prefix {prefix} at POP {pop}",
        settings_from,
        f"window {window.start:%Y-%m-%d %H:%M} - {window.end:%H:%M} UTC: {window.buckets} buckets of "
        f"{cfg.bucket_seconds} s from the {source}",
        f"a bucket counts with >= {cfg.min_samples} qualifying samples"
        f"{'' if cfg.include_app_limited else ' (app-limited ones left out)'}; bad = median delivery rate below the "
        f"POP's {cfg.threshold_quantile:.0%} percentile of prefix medians in that bucket",
        "",
    ]
    result = run_round(store, cfg, now, pop=pop, dry_run=True, refuse=refuse, evidence=evidence)
    keys = refresh(store, cfg, window, pop, result.round_time_ns)
    timeline = prefix_timeline(store, cfg, window, pop, prefix, keys)
    out.extend(format_timeline(timeline, window.start, window.buckets, cfg.bucket_seconds))
    out.append(app_limited_line(timeline, cfg.include_app_limited))
    out.append("")
    rows = result.decisions[result.decisions["prefix"] == prefix]
    if rows.empty:
        out.append("scores: the prefix has no data in the window and no state: nothing to decide")
    else:
        r = rows.iloc[0]
        out.append(
            f"scores: counted {int(r['counted_buckets'])} of {window.buckets} buckets "
            f"(needs {cfg.min_buckets}), "
            f"bad {int(r['bad_buckets'])}, bad<->good changes {int(r['transitions'])}"
        )
        out.append(
            f"  duty cycle {r['duty_cycle']:.2f} (candidate >= {cfg.min_duty:g}), "
            f"flap ratio {r['flap_ratio']:.2f} (candidate <= {cfg.max_flap:g})"
        )
        out.append(
            f"  median delivery rate {_rate(r['median_delivery_rate']).strip()}, low (p10) "
            f"{_rate(r['low_delivery_rate']).strip()}, median min_rtt {r['median_min_rtt_ms']:.1f} ms "
            f"(low RTT below {cfg.min_rtt_ms:g} ms)"
        )
        out.append(f"decision now (dry run): {r['decision']} -> {r['algorithm']}: {r['reason']}")
    pinned = load_pins(store, pop).get((pop, prefix))
    out.append(f"pin: {pin_reason(pinned)}" if pinned else "pin: none (the rounds decide it)")
    out.append(_last_recorded(last))
    out.extend(trial_lines(store, cfg, evidence or EvidenceSettings(), pop, prefix, now))
    return "\n".join(out)


def trial_lines(
    store: Store, cfg: ScoringSettings, evidence: EvidenceSettings, pop: str, prefix: str, now: dt.datetime
) -> list[str]:
    """The prefix's trials with their effects, from the effect model (the figures its decisions,
    the report and the lab summary show)."""
    trials = [t for t in stored_trials(store, now, pop) if t.prefix == prefix]
    if not trials:
        return ["trials: none"]
    until = max(t.end for t in trials)
    ev = Evidence.for_window(store, evidence, SampleRule.of(cfg), trials, until)
    out = [f"trials ({int(evidence.level * 100)}% intervals, bbr vs cubic buckets of this prefix):"]
    for t in trials:
        d, g = ev.effect(t), ev.effect(t, "goodput")
        start = dt.datetime.fromtimestamp(t.since, dt.UTC)
        state = {KEEP: "kept", REVERT: "reverted", TRIAL: "running"}.get(t.outcome, t.outcome)
        out.append(
            f"  from {start:%Y-%m-%d %H:%M} UTC, {t.rounds} rounds, {state}: p10 delivery rate {d.text()} "
            f"({d.n_a} bbr / {d.n_b} cubic buckets, {d.samples} samples); p10 goodput {g.text()}"
        )
        out.append(f"    why: {t.reason}")
    share = ev.app_limited_share()
    if math.isfinite(share):
        out.append(f"  app-limited samples left out of the trials: {share:.0%}")
    return out


def require_known_prefix(store: Store, pop: str, prefix: str, window: Window) -> tuple[Any, ...] | None:
    """The prefix's last recorded decision (None: none); ConfigError when the store has neither a
    decision nor telemetry of the prefix in the window (a typo, or another POP's prefix)."""
    rows = store.query_rows(query("scoring_last_decision"), {"pop": pop, "prefix": prefix})
    if rows:
        return tuple(rows[0])
    seen = store.query_rows(
        query("scoring_prefix_seen"), {"pop": pop, "prefix": prefix, "start": window.start, "end": window.end}
    )
    if not seen or int(seen[0][0]) == 0:
        raise ConfigError(
            f"unknown prefix {prefix} at POP {pop}: no decision recorded and no telemetry from "
            f"{window.start:%Y-%m-%d %H:%M} to {window.end:%Y-%m-%d %H:%M} UTC (check --prefix, --pop and --at)"
        )
    return None


def _last_recorded(last: tuple[Any, ...] | None) -> str:
    if last is None:
        return "last recorded decision: none"
    round_id, round_time, decision, reason = last
    return f"last recorded decision: {decision} in round {round_id} ({round_time}): {reason}"
