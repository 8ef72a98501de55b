"""The protobuf contract: generated code is in sync, batches round-trip."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import given, settings

from schemas.congestion_pb2 import ApplyStatus, CongestionConfig, PrefixEntry
from schemas.tcpinfo_pb2 import TcpInfoBatch

ROOT = Path(__file__).resolve().parents[2]

U32 = st.integers(min_value=0, max_value=2**32 - 1)
U64 = st.integers(min_value=0, max_value=2**64 - 1)


def test_generated_code_matches_proto(tmp_path: Path) -> None:
    """Regenerate *_pb2.py/pyi from the .proto files; any diff with the committed ones fails."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{ROOT / 'schemas'}",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            str(ROOT / "schemas" / "tcpinfo.proto"),
            str(ROOT / "schemas" / "congestion.proto"),
        ],
        check=True,
    )
    for name in ("tcpinfo_pb2.py", "tcpinfo_pb2.pyi", "congestion_pb2.py", "congestion_pb2.pyi"):
        fresh = (tmp_path / name).read_text()
        committed = (ROOT / "schemas" / name).read_text()
        assert fresh == committed, f"schemas/{name} is stale: run 'make proto'"


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(min_value=0, max_value=40).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(U32, min_size=n, max_size=n),
            st.lists(U64, min_size=n, max_size=n),
            st.binary(min_size=16 * n, max_size=16 * n),
        )
    ),
    host=st.text(max_size=20),
    sequence=U64,
)
def test_tcpinfo_batch_round_trip(rows: tuple[int, list[int], list[int], bytes], host: str, sequence: int) -> None:
    n, rtts, rates, addrs = rows
    batch = TcpInfoBatch(schema_version=1, host=host, sequence=sequence, row_count=n)
    batch.rtt.extend(rtts)
    batch.delivery_rate.extend(rates)
    batch.src_addr = addrs
    batch.cc_names.extend(["bbr", "cubic"])
    decoded = TcpInfoBatch.FromString(batch.SerializeToString())
    assert decoded == batch
    assert list(decoded.rtt) == rtts and list(decoded.delivery_rate) == rates
    assert decoded.src_addr == addrs and decoded.host == host and decoded.sequence == sequence


@settings(max_examples=40, deadline=None)
@given(
    prefixes=st.lists(st.from_regex(r"\A198\.51\.100\.[0-9]{1,3}/24\Z"), max_size=10),
    version=U64,
    signature=st.binary(max_size=64),
)
def test_congestion_config_round_trip(prefixes: list[str], version: int, signature: bytes) -> None:
    config = CongestionConfig(pop="lax", version=version, signature=signature)
    config.entries.extend(PrefixEntry(prefix=p, algorithm="bbr", duty_cycle=0.75) for p in prefixes)
    decoded = CongestionConfig.FromString(config.SerializeToString())
    assert decoded == config
    status = ApplyStatus(host="edge1", pop="lax", version=version, result=ApplyStatus.APPLIED, routes_added=3)
    assert ApplyStatus.FromString(status.SerializeToString()) == status
