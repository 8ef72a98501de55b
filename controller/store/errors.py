"""ClickHouse error codes -> the store's three errors (the exception classes themselves are in
dyncc_common/errors.py, the one exception tree).

classify() maps a ClickHouse error code (and its message, for the one code whose meaning
depends on it) to StoreContentError (the statement's data: the same statement fails again),
StoreUnavailable (an unreachable, failing or overloaded server: retry later) or a plain
StoreError (anything else: configuration or schema).  Both back ends use it: the server's
codes from clickhouse-driver (clickhouse.py), chDB's from its "Code: N." messages
(chdb.py, through error_code()).
"""

from __future__ import annotations

import re

from dyncc_common.errors import StoreContentError, StoreError, StoreUnavailable

__all__ = ["CONTENT_CODES", "UNAVAILABLE_CODES", "classify", "error_code"]

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
