"""The wire facts both sides write: batch caps, header limits, topic names, config keys.

Pure and numpy-free (stdlib only): `dyncc collect`'s settings and the agent read it before
anything heavy is loaded, and the controller reads the same objects, so the edge and the
centre cannot drift apart.

- `DEFAULT_MAX_ROWS`, `DEFAULT_MAX_BYTES`: a `TcpInfoBatch`'s row and byte caps (the
  collector's `--max-rows` / `--max-bytes` defaults, the encoder's and the tests').
- `HEADER_LIMITS`, `MAX_CC_NAMES`, `MAX_CC_NAME_BYTES`: the longest header strings in UTF-8
  bytes.  The collector refuses a longer `--host`, `--pop` or `--netns` at start; the decoder
  (schemas/tcpinfo_decode.py) dead-letters a batch over a limit.
- `TELEMETRY_TOPIC`, `CONFIG_TOPIC`, `STATUS_TOPIC`: the default Kafka topics of the
  telemetry (collect -> ingest), the signed configs (control -> agent) and the `ApplyStatus`
  reports (agent -> control).
- `CANARY_SUFFIX`, `config_key(pop, canary)`, `config_keys(pop)`: the Kafka key of a POP's
  configs, `<pop>` (POP-wide) or `<pop>/canary` (a canary wave).  The controller publishes
  under `config_key`; the agent reads the keys `config_keys` names.

The prefix rule both sides apply (shape, built-in ranges) is schemas/prefix_rules.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "CANARY_SUFFIX",
    "CONFIG_TOPIC",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ROWS",
    "HEADER_LIMITS",
    "MAX_CC_NAMES",
    "MAX_CC_NAME_BYTES",
    "STATUS_TOPIC",
    "TELEMETRY_TOPIC",
    "config_key",
    "config_keys",
]

#: rows and bytes of one TcpInfoBatch at most, by default
DEFAULT_MAX_ROWS = 4096
DEFAULT_MAX_BYTES = 900_000

#: Header string limits in UTF-8 bytes: host like a DNS name (RFC 1035: 255), POP a short
#: site code, netns a file name (NAME_MAX 255).  A congestion-control name is at most
#: TCP_CA_NAME_MAX (16) bytes in Linux; a batch names at most MAX_CC_NAMES of them.
HEADER_LIMITS: Mapping[str, int] = MappingProxyType({"host": 255, "pop": 64, "netns": 255})
MAX_CC_NAME_BYTES = 16
MAX_CC_NAMES = 256

TELEMETRY_TOPIC = "tcpinfo"
CONFIG_TOPIC = "dyncc-configs"  # compacted, key = config_key(pop, canary)
STATUS_TOPIC = "dyncc-apply-status"  # key = host

CANARY_SUFFIX = "/canary"


def config_key(pop: str, canary: bool) -> str:
    """The Kafka key of a POP's config: `<pop>`, or `<pop>/canary` for a canary wave."""
    return pop + CANARY_SUFFIX if canary else pop


def config_keys(pop: str) -> tuple[str, str]:
    """Every key a POP's agent reads: the POP-wide one, then the canary one."""
    return config_key(pop, False), config_key(pop, True)
