"""A ClickHouse cluster's shape and the rule that puts a client prefix on a shard.  Pure.

Topology is what `system.clusters` says of one cluster: shards (number, weight) and their
replicas (host, port).  Rows are sharded by the client prefix: SHARDING_KEY is the
expression the Distributed tables use, and shard_of() computes the same shard in Python
(halfMD5 of one string is the first 8 bytes of its MD5 read big-endian, on ClickHouse
18.16 and on chDB alike), so the loader can send each row to its shard itself.  Shards
are chosen the way a Distributed table does: key modulo the total weight, then the shard
whose weight range holds the remainder.

The sharded tables of a database live in a second database, shard_database(db), under the
same names; the Distributed tables in `db` have the names the code queries.  So a
shard-local query is the same SQL run with the shard database as default.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "SHARDING_KEY",
    "Replica",
    "Shard",
    "Topology",
    "shard_database",
    "shard_key",
    "shard_of",
    "shards_for_keys",
    "topology_from_rows",
]

#: the Distributed tables' sharding key (see the module docstring); shard_key() is its twin
SHARDING_KEY = "halfMD5(concat(pop, '/', prefix))"
#: suffix of the database that holds a database's shard-local tables
SHARD_DATABASE_SUFFIX = "_shard"


@dataclass(frozen=True)
class Replica:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Shard:
    number: int  # 1-based, as system.clusters counts
    weight: int
    replicas: tuple[Replica, ...]

    def describe(self) -> str:
        return f"shard {self.number} ({', '.join(map(str, self.replicas))})"


@dataclass(frozen=True)
class Topology:
    cluster: str
    shards: tuple[Shard, ...]

    @property
    def weights(self) -> tuple[int, ...]:
        return tuple(s.weight for s in self.shards)

    def nodes(self) -> list[Replica]:
        """Every replica of every shard, shard by shard."""
        return [r for s in self.shards for r in s.replicas]


def topology_from_rows(cluster: str, rows: Iterable[Sequence[object]]) -> Topology:
    """Topology from (shard_num, shard_weight, replica_num, host, port) rows; ValueError if unusable."""
    shards: dict[int, tuple[int, dict[int, Replica]]] = {}
    for shard_num, weight, replica_num, host, port in rows:
        number = int(str(shard_num))
        entry = shards.setdefault(number, (int(str(weight)), {}))
        entry[1][int(str(replica_num))] = Replica(str(host), int(str(port)))
    if not shards:
        raise ValueError(f"cluster {cluster!r} is not in system.clusters of the server")
    out = []
    for number in sorted(shards):
        weight, replicas = shards[number]
        if weight <= 0:
            raise ValueError(f"cluster {cluster!r}: shard {number} has weight {weight}")
        out.append(Shard(number, weight, tuple(replicas[i] for i in sorted(replicas))))
    return Topology(cluster, tuple(out))


def shard_database(database: str) -> str:
    """The database holding `database`'s shard-local tables on every node of a cluster."""
    return database + SHARD_DATABASE_SUFFIX


def shard_key(pop: str, prefix: str) -> int:
    """SHARDING_KEY of one (pop, prefix), computed in Python."""
    return int.from_bytes(hashlib.md5(f"{pop}/{prefix}".encode(), usedforsecurity=False).digest()[:8], "big")


def shards_for_keys(keys: np.ndarray, weights: Sequence[int]) -> np.ndarray:
    """The shard index (0-based) of each sharding key, as a Distributed table picks it."""
    bounds = np.cumsum(np.asarray(weights, dtype=np.uint64))
    remainders = np.asarray(keys, dtype=np.uint64) % bounds[-1]
    return np.searchsorted(bounds, remainders, side="right").astype(np.int64)


def shard_of(pop: str, prefix: str, weights: Sequence[int]) -> int:
    """The shard index (0-based) of one (pop, prefix)."""
    return int(shards_for_keys(np.array([shard_key(pop, prefix)], dtype=np.uint64), weights)[0])
