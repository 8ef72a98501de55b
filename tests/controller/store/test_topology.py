"""The prefix -> shard rule (controller/store/topology.py) and the loader's row routing
(controller/ingest/shards.py): pure, plus the sharding key checked against both back ends."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from controller.ingest.shards import row_shards, rows_to_load
from controller.store import Store
from controller.store.columns import StrColumn
from controller.store.topology import (
    SHARDING_KEY,
    shard_key,
    shard_of,
    shards_for_keys,
    topology_from_rows,
)

TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


def _slot_to_shard(weights: list[int]) -> list[int]:
    """ClickHouse's Distributed table: shard i takes weights[i] consecutive slots."""
    return [i for i, w in enumerate(weights) for _ in range(w)]


@given(
    st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=50), st.lists(st.integers(1, 5), min_size=1, max_size=6)
)
def test_shards_follow_the_distributed_tables_slots(keys: list[int], weights: list[int]) -> None:
    slots = _slot_to_shard(weights)
    got = shards_for_keys(np.array(keys, dtype=np.uint64), weights)
    assert got.tolist() == [slots[k % len(slots)] for k in keys]


@given(st.lists(st.tuples(st.sampled_from(["fra1", "ams1", "a" * 64]), TEXT), min_size=1, max_size=40))
def test_row_shards_equal_shard_of_each_row(rows: list[tuple[str, str]]) -> None:
    pops = sorted({p for p, _ in rows})
    prefixes = sorted({q for _, q in rows})
    columns = {
        "pop": StrColumn(np.array([pops.index(p) for p, _ in rows]), pops),
        "prefix": StrColumn(np.array([prefixes.index(q) for _, q in rows]), prefixes),
    }
    for weights in ((1,), (1, 1), (2, 1, 1)):
        assert row_shards(columns, weights).tolist() == [shard_of(p, q, weights) for p, q in rows]  # type: ignore[arg-type]


def test_rows_to_load_skips_a_batch_only_on_the_shards_that_hold_it() -> None:
    row_batch = np.array([0, 0, 0, 1, 1])
    row_shard = np.array([0, 1, 1, 0, 1])
    present = np.array([[True, False], [False, False]])  # batch 0 reached shard 0 only
    assert rows_to_load(row_batch, row_shard, present).tolist() == [False, True, True, True, True]


def test_topology_from_system_clusters_rows() -> None:
    rows = [(2, 1, 1, "10.0.0.3", 9000), (1, 1, 2, "10.0.0.2", 9000), (1, 1, 1, "10.0.0.1", 9000)]
    topology = topology_from_rows("c", rows)
    assert [s.number for s in topology.shards] == [1, 2]
    assert [str(r) for r in topology.shards[0].replicas] == ["10.0.0.1:9000", "10.0.0.2:9000"]
    assert topology.weights == (1, 1) and len(topology.nodes()) == 3


def test_the_servers_sharding_key_equals_pythons(store: Store) -> None:
    """halfMD5 of one string on ClickHouse 18.16 and chDB = the first 8 bytes of its MD5, big-endian."""
    pairs = [("fra1", "2001:db8:0:100::/56"), ("ams1", "198.51.100.0/24"), ("pöp", "203.0.113.0/24"), ("", "")]
    sql = " UNION ALL ".join(
        f"SELECT {i} AS i, toString({SHARDING_KEY}) AS k FROM (SELECT %(p{i})s AS pop, %(q{i})s AS prefix)"
        for i in range(len(pairs))
    )
    params = {f"p{i}": p for i, (p, _) in enumerate(pairs)} | {f"q{i}": q for i, (_, q) in enumerate(pairs)}
    got = {int(i): int(k) for i, k in store.query_rows(sql, params)}
    assert got == {i: shard_key(p, q) for i, (p, q) in enumerate(pairs)}
