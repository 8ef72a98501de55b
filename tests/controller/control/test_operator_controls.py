"""Operator intent is applied (issue 25, point 2), `dyncc control` end to end on ClickHouse 18.16
and chDB, configs signed to --publish-dir:

- a lowered --max-bbr-per-pop shrinks the POP in that round (weakest evidence first), with the
  reason per prefix, never silently;
- a deny list from the --config file holds in every round and is recorded with the round;
- pins (`dyncc control pin | unpin | pins`) hold through rounds that would select or revert the
  prefix, reach the edge in the signed config, and show in explain.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from controller.scoring.pins import load_pins
from controller.store import Store
from dyncc.cli import main as dyncc_main
from schemas.signing import load_public_key, verify
from tests.controller.control.test_cli_hardening import (
    POP,
    at,
    control,
    insert,
    published_file,
    round_ids,
    text,
)
from tests.controller.report.test_fleet import section_html
from tests.support import scoring_synth as synth
from tests.support.rollout_util import make_keys


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    return make_keys(tmp_path)


def reasons(store: Store, round_id: str) -> dict[str, tuple[str, str]]:
    rows = store.query_rows(
        "SELECT prefix, decision, reason FROM selections WHERE round_id = %(r)s AND pop = %(pop)s",
        {"r": round_id, "pop": POP},
    )
    return {text(p): (text(d), text(r)) for p, d, r in rows}


def controls(store: Store) -> list[tuple[str, str, int, int]]:
    """(round_id, deny, max_bbr_per_pop, pins) of every round of the POP, in round order."""
    rows = store.query_rows(
        "SELECT round_id, deny, max_bbr_per_pop, pins FROM round_controls WHERE pop = %(pop)s ORDER BY round_time_ns",
        {"pop": POP},
    )
    return [(text(r), text(d), int(c), int(p)) for r, d, c, p in rows]


def test_a_lowered_cap_shrinks_the_pop_in_that_round(
    store: Store, store_url: str, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    """100 prefixes on BBR, then a round with --max-bbr-per-pop 50: 50 leave in that round (the
    weakest evidence first: without trials none has an interval, so by duty cycle, then prefix),
    the signed config shrinks to 50, each leaver's row says why; the next round stays at 50."""
    bad = [f"198.19.{i}.0/24" for i in range(100)]
    patterns = {f"198.18.{i}.0/24": synth.NORMAL for i in range(120)} | {p: synth.STEADY_BAD for p in bad}
    synth.insert_samples(store, synth.samples_frame(POP, patterns, int(at(-180).timestamp()) - 30, 40))
    out = tmp_path / "cfg"
    options = ["--publish-dir", str(out), "--key", str(keys[0]), "--holdout", "0", "--threshold-quantile", "0.5"]
    assert control(store_url, at(0), *options) == 0
    assert len(published_file(out).entries) == 100

    assert control(store_url, at(5), *options, "--max-bbr-per-pop", "50") == 0
    config = published_file(out)
    verify(config, load_public_key(keys[1]))
    assert len(config.entries) == 50 and config.version == 2
    (_, s1), (r2, s2) = round_ids(store)
    assert (s1, s2) == ("published", "published")
    rows = reasons(store, r2)
    left = sorted(p for p, (d, _) in rows.items() if d == "revert")
    assert left == sorted(bad)[:50]  # equal evidence and duty: the prefix order decides
    assert {e.prefix for e in config.entries} == set(sorted(bad)[50:])
    for prefix in left:
        assert rows[prefix][1].startswith("over cap: --max-bbr-per-pop 50 with 100 on BBR; the weakest evidence")
    assert [c[2] for c in controls(store)] == [1000, 50]  # the cap each round applied, recorded

    assert control(store_url, at(10), *options, "--max-bbr-per-pop", "50") == 0
    (_, _), (_, _), (r3, s3) = round_ids(store)
    third = reasons(store, r3)
    assert s3 == "unchanged" and sum(d == "keep" for d, _ in third.values()) == 50
    assert all(third[p][0] == "skip" and third[p][1].startswith("capped") for p in left)  # no room back


def test_the_deny_list_of_the_config_file_holds_every_round(
    store: Store,
    store_url: str,
    keys: tuple[Path, Path],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    denied, good = "198.19.1.0/24", ["198.19.2.0/24", "198.19.3.0/24"]
    insert(store, [denied, *good], normal=20)
    out = tmp_path / "cfg"
    options = ["--publish-dir", str(out), "--key", str(keys[0]), "--holdout", "0"]
    assert control(store_url, at(0), *options) == 0  # no deny list yet: all three on BBR
    assert sorted(e.prefix for e in published_file(out).entries) == sorted([denied, *good])

    config = tmp_path / "control.toml"
    config.write_text(f'[control]\ndeny = ["{denied}"]\n')
    for minutes in (5, 10, 15):
        assert control(store_url, at(minutes), *options, "--config", str(config)) == 0
        assert sorted(e.prefix for e in published_file(out).entries) == good
    rounds = [r for r, _ in round_ids(store)]
    assert reasons(store, rounds[1])[denied] == ("revert", f"denied: {denied} overlaps denied range {denied}")
    for later in rounds[2:]:
        assert reasons(store, later)[denied] == ("skip", f"denied: {denied} overlaps denied range {denied}")
    assert [c[1] for c in controls(store)] == ["", denied, denied, denied]

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dyncc.control"):
        assert control(store_url, at(20), *options) == 0  # the file dropped: said so, and recorded
    assert f"the deny list changed since round {rounds[-1]}: no longer denied: {denied}" in caplog.text
    assert controls(store)[-1][1] == ""


def test_a_deny_flag_adds_to_the_deny_list_of_the_config_file(
    store: Store,
    store_url: str,
    keys: tuple[Path, Path],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 33 item 5: an urgent `--deny RANGE` with `deny = [...]` in the --config file denies the
    union; before, the flag replaced the file's list and its ranges (one a bbr pin) were published
    back on BBR with only a warning."""
    filed, pinned, urgent, good = "198.19.1.0/24", "198.19.2.0/24", "198.19.3.0/24", "198.19.4.0/24"
    insert(store, [filed, pinned, urgent, good], normal=20)
    out = tmp_path / "cfg"
    options = ["--publish-dir", str(out), "--key", str(keys[0]), "--holdout", "0"]
    pin = ["control", "--clickhouse", store_url, "pin", pinned, "--pop", POP, "--algorithm", "bbr"]
    assert dyncc_main([*pin, "--by", "alice", "--why", "ticket 7"]) == 0
    config = tmp_path / "control.toml"
    config.write_text(f'[control]\ndeny = ["{filed}", "{pinned}"]\n')
    assert control(store_url, at(0), *options, "--config", str(config)) == 0
    assert sorted(e.prefix for e in published_file(out).entries) == [urgent, good]

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dyncc.control"):
        assert control(store_url, at(5), *options, "--config", str(config), "--deny", urgent) == 0
    assert [e.prefix for e in published_file(out).entries] == [good]
    assert "no longer denied" not in caplog.text
    rows = reasons(store, round_ids(store)[-1][0])
    assert rows[filed] == ("skip", f"denied: {filed} overlaps denied range {filed}")
    assert rows[pinned][0] == "skip" and rows[pinned][1].startswith(f"denied: {pinned} overlaps denied range")
    assert rows[urgent] == ("revert", f"denied: {urgent} overlaps denied range {urgent}")
    recorded = controls(store)[-1][1]
    assert sorted(recorded.split(",")) == sorted([filed, pinned, urgent])


def test_a_pinned_prefix_stays_as_pinned_through_rounds(
    store: Store,
    store_url: str,
    keys: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A steadily bad prefix pinned to cubic is never selected; a normal one pinned to bbr is in the
    signed config though no round would select it; a prefix on BBR pinned to bbr stays through a cap
    that reverts the others; unpinned, the rounds decide again."""
    cubic, bbr_normal, held, other = "198.19.1.0/24", "198.18.3.0/24", "198.19.2.0/24", "198.19.3.0/24"
    insert(store, [cubic, held, other], normal=20)
    out = tmp_path / "cfg"
    options = ["--publish-dir", str(out), "--key", str(keys[0]), "--holdout", "0"]
    store_flag = ["--clickhouse", store_url]

    def pin(prefix: str, algorithm: str) -> int:
        argv = ["control", *store_flag, "pin", prefix, "--pop", POP, "--algorithm", algorithm]
        return dyncc_main([*argv, "--by", "alice", "--why", "ticket 42"])

    assert pin(cubic, "cubic") == 0 and pin(bbr_normal, "bbr") == 0
    assert f"pinned {cubic} at {POP} to cubic (by alice: ticket 42)" in capsys.readouterr().out
    assert control(store_url, at(0), *options) == 0
    r1 = round_ids(store)[0][0]
    first = reasons(store, r1)
    assert first[cubic][0] == "pin" and first[cubic][1].startswith("pinned to cubic by alice at ")
    assert first[bbr_normal][0] == "pin" and first[held][0] == "select" and first[other][0] == "select"
    config = published_file(out)
    verify(config, load_public_key(keys[1]))
    assert sorted(e.prefix for e in config.entries) == sorted([bbr_normal, held, other])

    # pinned while on BBR, then a cap that counts the two BBR pins: the unpinned one leaves, the pin stays
    assert pin(held, "bbr") == 0
    assert control(store_url, at(5), *options, "--max-bbr-per-pop", "2") == 0
    second = reasons(store, round_ids(store)[1][0])
    assert second[held][0] == "pin" and second[bbr_normal][0] == "pin" and second[cubic][0] == "pin"
    assert second[other][0] == "revert" and second[other][1].startswith("over cap: --max-bbr-per-pop 2 with 3")
    assert sorted(e.prefix for e in published_file(out).entries) == sorted([bbr_normal, held])
    assert [c[3] for c in controls(store)] == [2, 3]

    assert dyncc_main(["control", *store_flag, "pins", "--pop", POP]) == 0
    listing = capsys.readouterr().out
    assert all(p in listing for p in (cubic, bbr_normal, held)) and "ticket 42" in listing and "alice" in listing

    explain = ["control", *store_flag, "explain", "--pop", POP, "--prefix", cubic, "--at", "2024-03-01T12:10:30Z"]
    assert dyncc_main(explain) == 0
    assert "pin: pinned to cubic by alice at " in capsys.readouterr().out

    # the report shows the pins in force and why the over-cap prefix was reverted
    page_path = tmp_path / "report.html"
    report = ["report", *store_flag, "-o", str(page_path), "--since", "2024-03-01T09:00", "--until", "2024-03-01T13:00"]
    assert dyncc_main(report) == 0
    page = page_path.read_text()
    pins_part = section_html(page, "selections")
    assert all(p in pins_part for p in (cubic, bbr_normal, held)) and "ticket 42" in pins_part
    assert "over cap: --max-bbr-per-pop 2" in section_html(page, "reverted")

    unpin = ["control", *store_flag, "unpin", cubic, "--pop", POP, "--by", "bob", "--why", "fixed upstream"]
    assert dyncc_main(unpin) == 0
    assert set(load_pins(store, POP)) == {(POP, bbr_normal), (POP, held)}
    assert control(store_url, at(10), *options) == 0
    third = reasons(store, round_ids(store)[2][0])
    assert third[cubic][0] == "select" and third[held][0] == "pin"  # unpinned: decided again


def test_pin_refusals_exit_2_with_one_line(store: Store, store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    insert(store, ["198.19.1.0/24"], normal=2)
    base = ["control", "--clickhouse", store_url]
    cases = [
        (["pin", "198.19.1.0/24", "--pop", "nowhere", "--algorithm", "bbr"], "unknown POP 'nowhere'"),
        (["pin", "198.19.1.0/24", "--pop", POP, "--algorithm", "bbr", "--deny", "198.19.0.0/16"], "denied range"),
        (["pin", "198.19.1.5/24", "--pop", POP, "--algorithm", "cubic"], "host bits set"),
        (["pin", "198.19.1.0/24", "--pop", POP, "--algorithm", "bbr", "--why", " "], "--why is empty"),
        (["unpin", "198.19.1.0/24", "--pop", POP], "not pinned at POP lax"),
    ]
    for argv, needle in cases:
        extra = [] if "--why" in argv or argv[0] == "unpin" else ["--why", "x"]
        assert dyncc_main([*base, *argv, "--by", "alice", *extra]) == 2, argv
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and needle in err, (argv, err)
    assert load_pins(store) == {}
