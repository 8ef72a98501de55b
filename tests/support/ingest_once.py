"""The exactly-once check of the loader's tests: every row of some TcpInfoBatch messages in
`tcpinfo` once, one ledger row per batch, and the ledger's rows equal to each batch's."""

from __future__ import annotations

from controller.store import Store
from controller.store.sql import query
from schemas.tcpinfo_decode import scan_batch

#: every time a test writes (the ingest_verify query's window)
SPAN = {"start": "2000-01-01 00:00:00", "end": "2100-01-01 00:00:00"}


def assert_loaded_once(store: Store, msgs: list[bytes]) -> None:
    """Every row of `msgs` in tcpinfo once: the row count, one ledger row per batch, no duplicate key."""
    batches = [scan_batch(m) for m in msgs]
    rows = sum(b.rows for b in batches)
    assert int(store.query_rows("SELECT count() FROM tcpinfo")[0][0]) == rows
    entries, distinct, ledger_rows = store.query_rows(
        "SELECT count(), uniqExact(host, run_id, sequence), sum(rows) FROM ingest_batches"
    )[0]
    assert (int(entries), int(distinct), int(ledger_rows)) == (len(batches), len(batches), rows)
    dupes = store.query_rows(
        "SELECT host, run_id, sequence, cookie, time_ns, count() AS n FROM tcpinfo "
        "GROUP BY host, run_id, sequence, cookie, time_ns HAVING n > 1 LIMIT 3"
    )
    assert dupes == []
    assert store.query_rows(query("ingest_verify"), SPAN) == []  # ledger rows == rows per batch
