"""The lab summary's rollout lines (dyncc/lab/run.py rollout_waves) follow each prefix on its own."""

from dyncc.lab.run import rollout_waves

HOSTS = ["h1", "h2"]


def test_canary_then_pop_wide_is_one_group_even_with_toggles_around_it() -> None:
    rounds = [
        (1, {"h1": {"a": "bbr", "b": "bbr"}, "h2": {}}),
        # a trial toggle of c goes POP-wide while a and b still wait for their POP round
        (2, {"h1": {"a": "bbr", "b": "bbr", "c": "bbr"}, "h2": {"c": "bbr"}}),
        (3, {"h1": {"a": "bbr", "b": "bbr"}, "h2": {"a": "bbr", "b": "bbr"}}),
    ]
    assert rollout_waves(rounds, HOSTS) == [
        "2 prefixes: round 1 on h1, round 3 on all 2 hosts",
        "1 prefixes: round 2 on h1, h2",
    ]


def test_no_bbr_prefix_gives_no_wave_and_a_canary_that_never_spread_says_so() -> None:
    assert rollout_waves([(1, {"h1": {"a": "cubic"}})], HOSTS) == []
    assert rollout_waves([(4, {"h1": {"a": "bbr"}, "h2": {}})], HOSTS) == ["1 prefixes: round 4 on h1"]
