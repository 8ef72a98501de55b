"""The ingest ledger (ingest_batches) and the gaps recorded beside it, read and written for the
writer (controller/ingest/writer.py): which batch identities each shard's ledger already holds,
which rows of a group are not yet in their shard's ledger, each run's last loaded sequence, the
recorded gaps, and the ledger rows of empty batches (a non-empty batch's ledger row is written by
the materialized view of its rows' insert).  Identities go to the store as data
(Store.query_rows_with): a statement does not grow with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from controller.ingest.audit_rows import insert_small, now_s
from controller.ingest.columns import Prepared
from controller.ingest.sequence import Gap, Key
from controller.ingest.shards import row_shards, rows_to_load, take_rows
from controller.store.sql import query

if TYPE_CHECKING:
    from controller.store import Store
    from schemas.tcpinfo_decode import ScannedBatch

Identity = tuple[str, int, int]


class Ledger:
    def __init__(self, store: Store, native: bool) -> None:
        self.store = store
        self.native = native  # the loader's small inserts go as Native blocks (audit_rows.insert_small)

    def presence(self, identities: list[Identity]) -> dict[Identity, set[int]]:
        """The identities already in the ingest_batches ledger, with the shards whose ledger has them."""
        if not identities:
            return {}
        data: dict[str, tuple[str, list[Any]]] = {
            "host": ("String", [h for h, _, _ in identities]),
            "run_id": ("UInt64", [r for _, r, _ in identities]),
            "sequence": ("UInt64", [s for _, _, s in identities]),
        }
        wanted = set(identities)
        presence: dict[Identity, set[int]] = {}
        for index, shard in enumerate(self.store.shard_stores()):
            for h, r, s in shard.query_rows_with(query("ingest_ledger_lookup"), data):
                identity = (str(h), int(r), int(s))
                if identity in wanted:
                    presence.setdefault(identity, set()).add(index)
        return presence

    def unloaded(
        self,
        columns: Prepared,
        loaded: Sequence[tuple[Any, ScannedBatch]],
        batch_rows: list[int],
        presence: dict[Identity, set[int]],
    ) -> tuple[Prepared, list[int]]:
        """The rows of `columns` (batches `loaded`, `batch_rows` each) not yet in their shard's ledger."""
        shards = len(self.store.shard_stores())
        present = np.zeros((len(loaded), shards), dtype=bool)
        for i, (_, b) in enumerate(loaded):
            for s in presence.get(b.identity, ()):
                present[i, s] = True
        if not present.any():
            return columns, batch_rows
        row_batch = np.repeat(np.arange(len(loaded)), batch_rows)
        keep = rows_to_load(row_batch, row_shards(columns, self.store.shard_weights()), present)
        kept = np.bincount(row_batch[keep], minlength=len(loaded)).tolist()
        return take_rows(columns, keep), [int(n) for n in kept]

    @staticmethod
    def runs(keys: set[Key]) -> dict[str, tuple[str, list[Any]]]:
        ordered = sorted(keys)
        return {"host": ("String", [h for h, _ in ordered]), "run_id": ("UInt64", [r for _, r in ordered])}

    def last_sequences(self, keys: set[Key]) -> dict[Key, int]:
        """The last sequence in the ledger per (host, run_id) of `keys` (absent: none loaded).

        Read shard by shard from the replicas the rows go to (on a cluster a Distributed read
        may reach a replica still fetching the last inserts, and see gaps that are not there).
        """
        out: dict[Key, int] = {}
        for shard in self.store.shard_stores():
            for h, r, s in shard.query_rows_with(query("ingest_ledger_last"), self.runs(keys)):
                key = (str(h), int(r))
                out[key] = max(out.get(key, 0), int(s))
        return {k: v for k, v in out.items() if k in keys}

    def recorded_gaps(self, keys: set[Key]) -> list[Gap]:
        """The gaps in ingest_sequence_gaps of the runs `keys` (filled or not)."""
        rows = self.store.query_rows_with(query("ingest_gaps_of_runs"), self.runs(keys))
        return [Gap(str(h), int(r), str(p), int(lo), int(hi), int(t)) for h, r, lo, hi, p, t in rows]

    def insert_empty(self, batches: list[ScannedBatch]) -> None:
        """Ledger rows (0 rows) of batches without rows: they count as loaded, and their sequence too."""
        n = len(batches)
        # one ledger entry, on the first shard (a cluster's Distributed ledger reads every shard)
        insert_small(
            self.store.shard_stores()[0],
            self.native,
            "ingest_batches",
            {
                "inserted_at": np.full(n, now_s(), dtype=np.uint32),
                "batch_time": np.array([b.header.poll_start_ns // 1_000_000_000 for b in batches], dtype=np.uint32),
                "host": np.array([b.header.host for b in batches], dtype=object),
                "run_id": np.array([b.header.run_id for b in batches], dtype=np.uint64),
                "sequence": np.array([b.header.sequence for b in batches], dtype=np.uint64),
                "rows": np.zeros(n, dtype=np.uint64),
            },
        )
