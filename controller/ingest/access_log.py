"""One line of an nginx access log in dyncc's `log_format`, parsed into a typed record.  Pure.

    log_format dyncc '$msec $remote_addr $status $bytes_sent $body_bytes_sent $request_time
                      $connection $connection_requests "$request"';

e.g. `1763948000.123 2001:db8:101:300::2 200 1048931 1048576 0.874 17 2 "GET /obj/1m-3.bin HTTP/1.1"`.

parse_line(line) takes one line without its newline and returns an AccessRecord, or raises
LineError whose str() is a one-line reason naming the field at fault.  Nothing else escapes
it, whatever the bytes.  Checks:
  * the line is at most MAX_LINE_BYTES and printable ASCII (nginx writes `"`, `\\` and
    non-printable bytes of a variable as \\xHH);
  * the eight space-separated fields, then the request in double quotes, each in nginx's
    own form: $msec and $request_time are seconds with three decimals, $status three digits,
    the counters decimal;
  * numeric ranges: the time fits a DateTime (UInt32 seconds), byte counts and the
    connection number fit UInt64, $connection_requests fits UInt32;
  * $remote_addr is an IPv4 or IPv6 address.  An IPv4-mapped address (`::ffff:a.b.c.d`, a
    dual-stack listener) is that IPv4 client.

The record's `prefix` is the client's prefix (IPv4 /v4_len, IPv6 /v6_len; by default /24 and
/56) spelled exactly as the tcpinfo table spells it (controller.ingest.columns.format_prefix,
the text the collector's prefixes become), so requests join the scoring's groups; `family` is
the client's family (2 or 10), and `client` the address's canonical text.  The request is
split into `method` and `uri` (the target as nginx logged it, escapes included); a request
line nginx could not read is logged as "-" (method and uri empty) or kept as it came.

log_id_of(first_line) is the identity of a log file: a hash of its first line (see
docs/ingest.md, "Access logs").
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from functools import lru_cache
from typing import NamedTuple

from controller.ingest.columns import format_prefix
from dyncc_common.errors import DynccError
from schemas.addresses import AF_INET, AF_INET6, MAPPED_PREFIX

__all__ = [
    "MAX_LINE_BYTES",
    "AccessRecord",
    "LineError",
    "client_of",
    "log_id_of",
    "parse_line",
]

#: the longest line accepted, in bytes without the newline (nginx's request line is at most
#: 8 KiB with its default buffers, four times that escaped)
MAX_LINE_BYTES = 65536
_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1


class LineError(DynccError, ValueError):
    """A line that is not a dyncc access-log line; str() is the reason (one line)."""


class AccessRecord(NamedTuple):
    """One request, as the http_requests columns hold it."""

    time: int  # request end, whole seconds (UTC, Unix time)
    time_ms: int  # its milliseconds, 0-999
    client: str  # canonical address text (IPv4 for an IPv4-mapped client)
    family: int  # 2 (IPv4) or 10 (IPv6): the client's
    prefix: str  # the client prefix as tcpinfo spells it
    status: int
    bytes_sent: int
    body_bytes: int
    request_time: float  # seconds
    connection: int
    connection_requests: int
    method: str
    uri: str


# The request's usual form ("GET /uri HTTP/1.1") is split by the pattern itself; any other
# request text goes to _split_request, which splits the usual form the same way.
_LINE = re.compile(
    rb"(\d{1,10})\.(\d{3}) ([0-9A-Fa-f:.]{2,45}) (\d{3}) (\d{1,20}) (\d{1,20}) (\d{1,10}\.\d{3}) (\d{1,20}) (\d{1,10})"
    rb' "(?:([A-Z]{1,20}) ([\x21\x23-\x7e]+) HTTP/[0-9.]{1,5}|([\x20\x21\x23-\x7e]*))"'
)
_UNPRINTABLE = re.compile(rb"[^\x20-\x7e]")
_FIELDS = (
    ("$msec", re.compile(rb"\d{1,10}\.\d{3}"), "seconds with three decimals"),
    ("$remote_addr", re.compile(rb"[0-9A-Fa-f:.]{2,45}"), "an IP address"),
    ("$status", re.compile(rb"\d{3}"), "a three-digit status"),
    ("$bytes_sent", re.compile(rb"\d{1,20}"), "a byte count"),
    ("$body_bytes_sent", re.compile(rb"\d{1,20}"), "a byte count"),
    ("$request_time", re.compile(rb"\d{1,10}\.\d{3}"), "seconds with three decimals"),
    ("$connection", re.compile(rb"\d{1,20}"), "a connection number"),
    ("$connection_requests", re.compile(rb"\d{1,10}"), "a request count"),
)


def parse_line(line: bytes, v4_len: int = 24, v6_len: int = 56) -> AccessRecord:
    """The record of one line (without its newline); LineError with the reason otherwise."""
    if len(line) > MAX_LINE_BYTES:
        raise LineError(f"line is {len(line)} bytes, over the {MAX_LINE_BYTES}-byte limit")
    m = _LINE.fullmatch(line)
    if m is None:
        raise LineError(_diagnose(line))
    sec, ms, addr, status, sent, body, rtime, conn, conn_reqs, method, uri, request = m.groups()
    seconds = int(sec)
    if seconds > _U32:
        raise LineError(f"$msec {sec.decode()}.{ms.decode()} is past the DateTime range (2106)")
    bytes_sent = int(sent)
    if bytes_sent > _U64:
        raise LineError(f"$bytes_sent {bytes_sent} is over 2^64-1")
    body_bytes = int(body)
    if body_bytes > _U64:
        raise LineError(f"$body_bytes_sent {body_bytes} is over 2^64-1")
    connection = int(conn)
    if connection > _U64:
        raise LineError(f"$connection {connection} is over 2^64-1")
    requests = int(conn_reqs)
    if requests > _U32:
        raise LineError(f"$connection_requests {requests} is over 2^32-1")
    client, family, prefix = client_of(addr, v4_len, v6_len)
    if method is not None:
        parts = (method.decode("ascii"), uri.decode("ascii"))
    else:
        parts = _split_request(request.decode("ascii"))
    return AccessRecord(
        seconds,
        int(ms),
        client,
        family,
        prefix,
        int(status),
        bytes_sent,
        body_bytes,
        float(rtime),
        connection,
        requests,
        *parts,
    )


@lru_cache(maxsize=1 << 16)
def client_of(addr: bytes, v4_len: int = 24, v6_len: int = 56) -> tuple[str, int, str]:
    """(client text, family, prefix text) of a $remote_addr; LineError if it is not an address."""
    try:
        ip = ipaddress.ip_address(addr.decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        raise LineError(f"$remote_addr {addr[:64]!r} is not an IP address") from None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if isinstance(ip, ipaddress.IPv4Address):
        return str(ip), AF_INET, format_prefix(MAPPED_PREFIX + ip.packed, v4_len)
    return str(ip), AF_INET6, format_prefix(ip.packed, v6_len)


def _split_request(request: str) -> tuple[str, str]:
    """(method, uri) of a request line as nginx logs it ("-": none)."""
    if request in ("", "-"):
        return "", ""
    method, _, rest = request.partition(" ")
    target, sep, protocol = rest.rpartition(" ")
    if sep and protocol.startswith("HTTP/"):
        return method, target
    return method, rest


def _diagnose(line: bytes) -> str:
    """Why a line does not match the format: the first field at fault."""
    if not line:
        return "empty line"
    bad = _UNPRINTABLE.search(line)
    if bad is not None:
        return (
            f"byte 0x{line[bad.start()]:02x} at column {bad.start() + 1} is not printable ASCII "
            "(nginx escapes such bytes as \\xHH)"
        )
    head, sep, request = line.partition(b' "')
    if not sep:
        return "no double-quoted $request after the numeric fields"
    if not request.endswith(b'"') or b'"' in request[:-1]:
        return "the $request is not one double-quoted field at the end of the line"
    parts = head.split(b" ")
    if len(parts) != len(_FIELDS):
        return f"{len(parts)} space-separated fields before the $request, expected {len(_FIELDS)}"
    for (name, pattern, what), part in zip(_FIELDS, parts, strict=True):
        if not pattern.fullmatch(part):
            return f"{name} {part[:64].decode('ascii')!r} is not {what}"
    return "not the dyncc log_format"


def log_id_of(first_line: bytes) -> int:
    """The identity of a log file: the first 8 bytes of BLAKE2b of its first line, as UInt64."""
    return int.from_bytes(hashlib.blake2b(first_line, digest_size=8).digest(), "big")
