"""The controller's state: read the previous round, write this one.

Every round writes one `selections` row per scored prefix plus every prefix carrying
state (on BBR, holdout, cooldown), so the rows of one round are a whole state: which
prefixes are on BBR since when, holdouts, cooldowns, baselines.  `round_outcomes`
says per (round, POP) what became of those decisions (controller/store/outcomes.py, its
vocabulary and writer): written `recorded` with the round, then the publisher's answer.

The previous state of a POP is its latest round up to the round time whose decisions
are in force: `published` or `unchanged` (and `legacy`, from before outcomes existed).
A rejected, failed or held round never becomes state, so the next round starts from
what was published.  Without a publisher (`include_recorded`), `recorded` rounds count
too.  A round of a killed POP (`killed`) counts with nothing on BBR.  Exactly one
round per POP is read, so re-running a round at the same time never doubles a state.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import numpy as np

from controller.scoring.decide import STATE_COLUMNS, empty_state
from controller.scoring.frames import by_pop_prefix, columns_of, frame, texts
from controller.store.decisions import ON_BBR_FOR_GOOD, ON_BBR_INCLUDING_TRIALS, SKIP
from controller.store.outcomes import IN_FORCE, KILLED, RECORDED
from controller.store.sql import query, splice, values_list

if TYPE_CHECKING:
    import pandas as pd

    from controller.store import Store

RECENT_DAYS = 2  # look for the latest round here first (a bounded scan), then everywhere
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def state_statuses(include_recorded: bool) -> tuple[str, ...]:
    """Round outcomes whose selections rows are state (see the module docstring)."""
    return (*IN_FORCE, KILLED, *((RECORDED,) if include_recorded else ()))


def latest_rounds(
    store: Store, pop: str, now: dt.datetime, include_recorded: bool = True
) -> dict[str, tuple[str, str, Any]]:
    """pop -> (round_id, outcome, round_time) of the round holding its state (pop '' = every POP)."""
    params = {
        "pop": pop,
        "now_ns": _ns(now),
        "statuses": list(state_statuses(include_recorded)),
        "since": now - dt.timedelta(days=RECENT_DAYS),
    }
    sql = query("scoring_round_state_latest")
    rows = store.query_rows(sql, params)
    if not rows:  # nothing recent (a long outage or a new store): look everywhere, once
        rows = store.query_rows(sql, {**params, "since": EPOCH})
    return {_text(p): (_text(r), _text(o), t) for p, r, o, t in rows}


class StateMemo:
    """The state the last round of this process wrote, kept so that its next round need not read
    it back from `selections` (a long-running controller's warm round).

    load_previous uses it only when the store names exactly the rounds it holds as every POP's
    latest (round ids are unique: controller/scoring/round.py new_round_id); anything else (a
    round not published, another controller's round, a POP it did not score, a round at an
    earlier time) reads the store.  The kept state is what the store would return for those
    rows (tests/controller/scoring/test_state_memo.py)."""

    def __init__(self) -> None:
        self.rounds: dict[str, str] = {}  # pop -> the round id whose state `columns` is
        self.columns: dict[str, np.ndarray] | None = None

    def remember(self, decisions: pd.DataFrame, round_id: str) -> None:
        """The state of the round `round_id` just written: its `decisions` rows (STATE_COLUMNS)."""
        columns, _ = by_pop_prefix(columns_of(decisions, STATE_COLUMNS), unique=True)
        # the store keeps trial columns only for the rows of a trial (trial_rounds); the others read 0 / nan
        off = columns["trial_since"] <= 0
        columns["trial_since"] = np.where(off, 0, columns["trial_since"])
        for name in ("trial_effect", "trial_low", "trial_high"):
            columns[name] = np.where(off, MISSING_TRIAL_VALUE, columns[name])
        self.rounds = dict.fromkeys(map(str, set(columns["pop"].tolist())), round_id)
        self.columns = {name: np.array(col, copy=True) for name, col in columns.items()}  # not views of `decisions`

    def forget(self) -> None:
        self.rounds, self.columns = {}, None

    def holds(self, latest: dict[str, tuple[str, str, Any]]) -> bool:
        """Whether `latest` (latest_rounds) names exactly the kept rounds."""
        return self.columns is not None and {p: r for p, (r, _, _) in latest.items()} == self.rounds

    def take(self, latest: dict[str, tuple[str, str, Any]]) -> dict[str, np.ndarray] | None:
        """The kept columns, handed over and no longer kept, when `latest` names exactly the kept
        rounds; else None (and the memo stays as it is)."""
        if not self.holds(latest):
            return None
        columns = self.columns
        self.forget()
        return columns


#: a trial column of a row outside any trial, as the store's ANY LEFT JOIN of trial_rounds returns it
MISSING_TRIAL_VALUE = 0.0


def load_previous(
    store: Store, pop: str, now: dt.datetime, include_recorded: bool = True, memo: StateMemo | None = None
) -> pd.DataFrame:
    """The state (STATE_COLUMNS) for one POP or every POP before a round at `now`: one row per
    (pop, prefix), sorted by them.  memo: the state this process wrote last, used instead of
    reading `selections` when those are the rounds in force (StateMemo)."""
    latest = latest_rounds(store, pop, now, include_recorded)
    if not latest:
        return empty_state()
    columns = memo.take(latest) if memo is not None else None
    if columns is None:
        keys = values_list([(p, r) for p, (r, _, _) in sorted(latest.items())])  # one per POP
        times = [t for _, _, t in latest.values()]
        df = store.query_df(
            splice(query("scoring_previous_state"), {"keys": keys}),
            {"lo": _utc(min(times)), "hi": _utc(max(times))},
        )
        columns, _ = by_pop_prefix(columns_of(df, STATE_COLUMNS), unique=True)
    out = frame(columns)
    killed = [p for p, (_, outcome, _) in latest.items() if outcome == KILLED]
    if killed:  # the kill switch removed every route: nothing is on BBR, other state stays
        off = out["pop"].isin(killed) & out["decision"].isin(ON_BBR_INCLUDING_TRIALS)
        out.loc[off, "decision"] = SKIP
        out.loc[off, "selected_since"] = 0
        out.loc[off, "trial_since"] = 0
        out.loc[off, "baseline_low_rate"] = np.nan
    return out


def _ns(when: dt.datetime) -> int:
    when = when if when.tzinfo else when.replace(tzinfo=dt.UTC)
    return int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000


def _utc(value: Any) -> dt.datetime:
    """A DateTime read back from either back end, as an aware UTC datetime."""
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    import pandas as pd

    stamp = pd.Timestamp(value)
    return (stamp.tz_convert("UTC") if stamp.tzinfo else stamp.tz_localize("UTC")).to_pydatetime()


def on_bbr(previous: pd.DataFrame) -> pd.DataFrame:
    return previous[previous["decision"].isin(ON_BBR_FOR_GOOD)]


def _datetimes(seconds: Any) -> np.ndarray:
    return np.asarray(seconds, dtype="int64").astype("datetime64[s]")


def write_round(store: Store, decisions: pd.DataFrame, round_id: str, round_time_ns: int) -> int:
    """Insert the round's decision rows into `selections` (and the rows of its trials into
    `trial_rounds`); returns the selections rows written."""
    n = len(decisions)
    if n == 0:
        return 0
    d = decisions
    round_s = round_time_ns // 1_000_000_000

    def clip16(col: str) -> np.ndarray:
        return np.clip(d[col].to_numpy(dtype="int64"), 0, 65535).astype("uint16")

    columns: dict[str, Any] = {
        "round_id": [round_id] * n,
        "round_time": _datetimes(np.full(n, round_s)),
        "round_time_ns": np.full(n, round_time_ns, dtype="uint64"),
        "pop": texts(d["pop"]),
        "prefix": texts(d["prefix"]),
        "family": d["family"].to_numpy(dtype="uint8"),
        "samples": d["samples"].to_numpy(dtype="uint64"),
        "qualifying": d["qualifying"].to_numpy(dtype="uint64"),
        "counted_buckets": clip16("counted_buckets"),
        "bad_buckets": clip16("bad_buckets"),
        "transitions": clip16("transitions"),
        "duty_cycle": d["duty_cycle"].to_numpy(dtype="float64"),
        "flap_ratio": d["flap_ratio"].to_numpy(dtype="float64"),
        "median_delivery_rate": d["median_delivery_rate"].to_numpy(dtype="float64"),
        "low_delivery_rate": d["low_delivery_rate"].to_numpy(dtype="float64"),
        "median_min_rtt_ms": d["median_min_rtt_ms"].to_numpy(dtype="float64"),
        "decision": texts(d["decision"]),
        "algorithm": texts(d["algorithm"]),
        "reason": texts(d["reason"]),
        "holdout": d["holdout"].to_numpy(dtype="uint8"),
        "selected_since": _datetimes(d["selected_since"]),
        "holdout_since": _datetimes(d["holdout_since"]),
        "cooldown_until": _datetimes(d["cooldown_until"]),
        "last_seen": _datetimes(d["last_seen"]),
        "baseline_low_rate": d["baseline_low_rate"].to_numpy(dtype="float64"),
        "effect": d["effect"].to_numpy(dtype="float64"),
        "holdout_effect": d["holdout_effect"].to_numpy(dtype="float64"),
    }
    written = store.insert_columns("selections", columns)
    in_trial = np.flatnonzero(d["trial_since"].to_numpy(dtype="int64") > 0)
    if len(in_trial):  # the trial rows of the round (sql/migrations/010_trials.sql)
        t = d.iloc[in_trial]
        m = len(in_trial)
        store.insert_columns(
            "trial_rounds",
            {
                "round_id": [round_id] * m,
                "round_time": _datetimes(np.full(m, round_s)),
                "pop": texts(t["pop"]),
                "prefix": texts(t["prefix"]),
                "decision": texts(t["decision"]),
                "algorithm": texts(t["algorithm"]),
                "reason": texts(t["reason"]),
                "trial_since": _datetimes(t["trial_since"]),
                "trial_effect": t["trial_effect"].to_numpy(dtype="float64"),
                "trial_low": t["trial_low"].to_numpy(dtype="float64"),
                "trial_high": t["trial_high"].to_numpy(dtype="float64"),
            },
        )
    return written


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
