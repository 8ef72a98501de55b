"""dyncc's exception tree (stdlib only: the CLI, the contract and the netlink package import it).

Every exception class dyncc defines descends from DynccError (tests/contract/test_architecture.py
checks it); where a class was a ValueError before, ValueError stays its second base.

    DynccError                          base of every dyncc error; str() is a one-line reason
    ├── ConfigError                     bad configuration or arguments: one line, exit 2
    ├── StoreError                      any store failure (see below)
    │   ├── StoreUnavailable            the store could not be reached or is overloaded
    │   │                               (connection refused or lost, timeouts, too many parts /
    │   │                               queries, memory limit): the same statement may succeed
    │   │                               later, so callers pause and retry it
    │   └── StoreContentError           the server refused the statement because of the data it
    │                                   carries (too large, unparsable, a value a check rejects):
    │                                   the same statement fails again, so a caller that knows
    │                                   which input it came from sets that input aside (ingest
    │                                   dead-letters the messages responsible) and goes on
    │
    │   the contract (schemas)
    ├── BatchDecodeError (+ValueError)  schemas.tcpinfo_decode: a TcpInfoBatch that is malformed
    ├── GroupDecodeError                schemas.tcpinfo_decode: a group of batches that cannot be
    │                                   decoded together (decoded one by one instead)
    ├── SignatureError                  schemas.signing: a CongestionConfig signature that fails
    │
    │   the edge (collector)
    ├── DumpError                       collector.netlink.sockdiag: a sock_diag dump failed
    │   └── DumpTimeout                 ... because the kernel did not answer in time
    ├── InvalidConfig (+ValueError)     collector.agent.plan: a config the agent refuses
    ├── RouteWriteError                 collector.agent.routes: writing or verifying a route failed
    ├── StateError                      collector.agent.state: an unreadable agent state file
    ├── BpfBuildError                   collector.agent.bpf_build: a BPF program (the agent's
    │                                   sock_ops, the lab's tc programs) did not compile
    ├── BpfProgramError (+OSError)      collector.agent.bpf_prog: a bpftool step (load, attach,
    │                                   detach) failed
    ├── BpfMapError (+OSError)          collector.agent.bpf_maps: a BPF map read or write failed
    │
    │   the centre (controller)
    ├── SchemaMismatch                  controller.store.native: a table's columns differ from
    │                                   the Native block being sent
    ├── ScoringConfigError (+ValueError)  controller.scoring.settings: invalid scoring settings
    ├── PublishError                    controller.rollout.sinks: a config could not be published
    ├── LineError (+ValueError)         controller.ingest.access_log: an access-log line that does
    │                                   not parse (dead-lettered)
    ├── RecordingError                  dyncc.lab.telemetry: an unreadable lab recording
    ├── RoundFailed                     dyncc.lab.control: a lab round did not complete
    ├── TopologyError                   dyncc.lab.topology: the lab network could not be built
    ├── PathError                       dyncc.lab.paths: a path class or shaping entry is invalid
    └── DelayError                      dyncc.lab.delay: the delay relay could not start

Two private subclasses of DynccError are control flow inside one module and never leave it:
schemas.tcpinfo_decode._Unusual and collector.netlink.sockdiag_dump._Stopped.

Anything else from the store (an unknown table, bad credentials: configuration or schema)
stays a plain StoreError: not the data's fault and not transient either.  Ingest treats
it like StoreUnavailable (pause, retry, log the reason) rather than dead-letter good
messages because of a server problem.

classify() maps a ClickHouse error code (and its message, for the one code whose meaning
depends on it) to one of the three store errors; both back ends use it (the server's codes
from clickhouse-driver, chDB's from its "Code: N." messages).
"""

from __future__ import annotations

import re


class DynccError(Exception):
    """Base of dyncc's errors; str() is a one-line reason for a person."""


class ConfigError(DynccError):
    """Bad configuration or arguments: reported as one line, exit code 2."""


class StoreError(DynccError):
    """A store operation failed; str() is a one-line reason for a person."""


class StoreUnavailable(StoreError):
    """Connection or overload trouble: retry the same statement later."""


class StoreContentError(StoreError):
    """The server refused the statement's data: retrying it unchanged fails again."""


#: ClickHouse error codes caused by the data a statement carries.
CONTENT_CODES = frozenset(
    {
        6,  # CANNOT_PARSE_TEXT
        26,  # CANNOT_PARSE_QUOTED_STRING
        27,  # CANNOT_PARSE_INPUT_ASSERTION_FAILED
        38,  # CANNOT_PARSE_DATE
        41,  # CANNOT_PARSE_DATETIME
        53,  # TYPE_MISMATCH
        62,  # SYNTAX_ERROR, also "Max query size exceeded" (a statement over max_query_size)
        69,  # ARGUMENT_OUT_OF_BOUND
        70,  # CANNOT_CONVERT_TYPE
        72,  # CANNOT_PARSE_NUMBER
        117,  # INCORRECT_DATA
        128,  # TOO_LARGE_ARRAY_SIZE
        131,  # TOO_LARGE_STRING_SIZE
        153,  # ILLEGAL_DIVISION
        167,  # TOO_DEEP_AST
        168,  # TOO_BIG_AST
        190,  # SIZES_OF_ARRAYS_DOESNT_MATCH
        306,  # TOO_DEEP_RECURSION
        321,  # VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE
        395,  # FUNCTION_THROW_IF_VALUE_IS_NON_ZERO (a throwIf() check on a value)
        469,  # VIOLATED_CONSTRAINT (a CHECK constraint)
    }
)

#: ClickHouse error codes of an unreachable, failing or overloaded server.
UNAVAILABLE_CODES = frozenset(
    {
        3,  # UNEXPECTED_END_OF_FILE
        23,  # CANNOT_READ_FROM_ISTREAM
        24,  # CANNOT_WRITE_TO_OSTREAM
        32,  # ATTEMPT_TO_READ_AFTER_EOF
        33,  # CANNOT_READ_ALL_DATA
        159,  # TIMEOUT_EXCEEDED
        160,  # TOO_SLOW
        201,  # QUOTA_EXPIRED
        202,  # TOO_MANY_SIMULTANEOUS_QUERIES
        203,  # NO_FREE_CONNECTION
        209,  # SOCKET_TIMEOUT
        210,  # NETWORK_ERROR
        236,  # ABORTED
        241,  # MEMORY_LIMIT_EXCEEDED
        242,  # TABLE_IS_READ_ONLY
        243,  # NOT_ENOUGH_SPACE
        252,  # TOO_MANY_PARTS ("Merges are processing significantly slower than inserts")
        279,  # ALL_CONNECTION_TRIES_FAILED
        285,  # TOO_FEW_LIVE_REPLICAS
        319,  # UNKNOWN_STATUS_OF_INSERT
        394,  # QUERY_WAS_CANCELLED
        425,  # SYSTEM_ERROR
        439,  # CANNOT_SCHEDULE_TASK
        999,  # KEEPER_EXCEPTION
        1000,  # POCO_EXCEPTION (connection reset and the like)
    }
)

_CODE = re.compile(r"\bCode:\s*(\d+)")


def error_code(message: str) -> int | None:
    """The ClickHouse error code in a message such as chDB's "Code: 62. DB::Exception: ..."."""
    match = _CODE.search(message)
    return int(match.group(1)) if match else None


def classify(code: int | None, message: str = "") -> type[StoreError]:
    """StoreContentError, StoreUnavailable or StoreError for a server error `code` / `message`."""
    if code == 252 and "partitions for single insert block" in message.lower():
        return StoreContentError  # one block spans too many partitions: its data, not the load
    if code in CONTENT_CODES:
        return StoreContentError
    if code in UNAVAILABLE_CODES:
        return StoreUnavailable
    return StoreError
