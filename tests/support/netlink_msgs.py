"""Test-only helpers over raw netlink bytes: dumps, messages, attributes, and malformed variants.

Contract (independent of the collector's parser: plain struct reads, used as
the oracle's side of the comparison):
  * `reply_dumps(datagrams)` drops requests (NLM_F_REQUEST) and cuts the
    replies into dumps, one per NLMSG_DONE (a trailing run without DONE is a
    dump of its own, as in single-datagram captures);
  * `messages(datagram)` lists the netlink messages of a datagram;
  * `attributes(msg)` lists the rtattrs after the inet_diag_msg of one
    SOCK_DIAG_BY_FAMILY message as `Attr(type, start, nla_len)`;
  * `diag_message(attrs)` builds a message from raw attributes (zero
    inet_diag_msg except the family), for single-attribute fixtures;
  * `truncated` / `with_nla_len` make a malformed copy of a message and
    `decoded(msg)` parses one message with the real parser into comparable
    values, for the property tests.
  * `parse_datagrams(datagrams, errors)` walks and parses a list of received
    datagrams with the real parser (what the collector's dump loop does as it
    receives them).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from collector.netlink.sockdiag import WalkResult, walk_messages
from collector.netlink.sockdiag_parse import (
    DIAG_MSG_LEN,
    PAD,
    ErrorCounts,
    Parsed,
    parse_messages,
)

NLMSG_HDRLEN = 16
NLM_F_REQUEST = 0x1
NLMSG_DONE = 3
SOCK_DIAG_BY_FAMILY = 20


@dataclass(frozen=True)
class Attr:
    type: int
    start: int  # offset of the rtattr header in the message
    nla_len: int  # header + payload, unpadded

    @property
    def end(self) -> int:
        return self.start + self.nla_len


def messages(datagram: bytes) -> list[bytes]:
    """The netlink messages of one datagram, each cut to its nlmsg_len (stops at a malformed header)."""
    out: list[bytes] = []
    pos = 0
    while pos + NLMSG_HDRLEN <= len(datagram):
        (length,) = struct.unpack_from("<I", datagram, pos)
        if length < NLMSG_HDRLEN or pos + length > len(datagram):
            break
        out.append(datagram[pos : pos + length])
        pos += (length + 3) & ~3
    return out


def msg_type(msg: bytes) -> int:
    return struct.unpack_from("<H", msg, 4)[0]


def is_request(datagram: bytes) -> bool:
    return len(datagram) >= NLMSG_HDRLEN and bool(struct.unpack_from("<H", datagram, 6)[0] & NLM_F_REQUEST)


def reply_dumps(datagrams: Iterable[bytes]) -> list[list[bytes]]:
    """Reply datagrams grouped into dumps (requests dropped)."""
    dumps: list[list[bytes]] = []
    current: list[bytes] = []
    for dgram in datagrams:
        if is_request(dgram):
            continue
        current.append(dgram)
        if any(msg_type(m) == NLMSG_DONE for m in messages(dgram)):
            dumps.append(current)
            current = []
    if current:
        dumps.append(current)
    return dumps


def diag_messages(dump: list[bytes]) -> list[bytes]:
    """Every SOCK_DIAG_BY_FAMILY message of a dump, in order."""
    return [m for d in dump for m in messages(d) if msg_type(m) == SOCK_DIAG_BY_FAMILY]


def attributes(msg: bytes) -> list[Attr]:
    """The attribute chain of a SOCK_DIAG message (stops at the first malformed header)."""
    out: list[Attr] = []
    pos = DIAG_MSG_LEN
    while pos + 4 <= len(msg):
        nla_len, nla_type = struct.unpack_from("<HH", msg, pos)
        if nla_len < 4 or pos + nla_len > len(msg):
            break
        out.append(Attr(nla_type & 0x3FFF, pos, nla_len))
        pos += (nla_len + 3) & ~3
    return out


def attr_payload(msg: bytes, attr: Attr) -> bytes:
    return msg[attr.start + 4 : attr.end]


def rtattr_bytes(rta_type: int, payload: bytes) -> bytes:
    raw = struct.pack("<HH", 4 + len(payload), rta_type) + payload
    return raw + bytes(-len(raw) % 4)


def diag_message(attrs: Iterable[bytes], *, family: int = 2, header: bytes | None = None) -> bytes:
    """A SOCK_DIAG_BY_FAMILY message: nlmsghdr + inet_diag_msg (given, or zero with `family`) + attrs.

    Each element of `attrs` is one rtattr as on the wire (header + payload);
    it is padded to 4 bytes here.
    """
    body = header if header is not None else bytes([family]) + bytes(71)
    if len(body) != DIAG_MSG_LEN - NLMSG_HDRLEN:
        raise ValueError(f"inet_diag_msg must be {DIAG_MSG_LEN - NLMSG_HDRLEN} bytes")
    chain = b"".join(a + bytes(-len(a) % 4) for a in attrs)
    length = NLMSG_HDRLEN + len(body) + len(chain)
    return struct.pack("<IHHII", length, SOCK_DIAG_BY_FAMILY, 0x2, 1, 0) + body + chain


def keep_attributes(msg: bytes, keep: Iterable[Attr]) -> bytes:
    """The same message with only the listed (whole) attributes."""
    return diag_message([msg[a.start : a.end] for a in keep], header=msg[NLMSG_HDRLEN:DIAG_MSG_LEN])


def truncated(msg: bytes, cut: int) -> bytes:
    """The first `cut` bytes of a message, nlmsg_len set to `cut` (a sender cutting it short)."""
    out = bytearray(msg[:cut])
    struct.pack_into("<I", out, 0, cut)
    return bytes(out)


def with_nla_len(msg: bytes, attr: Attr, nla_len: int) -> bytes:
    """The message with one attribute's nla_len overwritten."""
    out = bytearray(msg)
    struct.pack_into("<H", out, attr.start, nla_len)
    return bytes(out)


def decoded(msg: bytes) -> tuple[int, dict[str, Any], dict[str, int]]:
    """(rows, comparable values of the row, non-zero error counts) of one message through the parser."""
    errors = ErrorCounts()
    parsed, _ = parse_datagrams([msg], errors)
    values: dict[str, Any] = {}
    if parsed.rows:
        for name, col in parsed.columns.items():
            values[name] = col[0].tolist()
        values["cc_index"] = parsed.cc_names[int(parsed.columns["cc_index"][0])]
    return parsed.rows, values, {k: v for k, v in errors.items() if v}


def check_truncated(msg: bytes, cut: int) -> None:
    """A message cut to `cut` bytes decodes like the message of its whole attributes, split ones counted."""
    rows, got, errors = decoded(truncated(msg, cut))
    if cut < DIAG_MSG_LEN:
        assert (rows, errors) == (0, {"short_message": 1})
        return
    attrs = attributes(msg)
    whole = [a for a in attrs if a.end <= cut]
    split = [a for a in attrs if a.start < cut < a.end]
    ref_rows, ref, ref_errors = decoded(keep_attributes(msg, whole))
    assert rows == ref_rows == 1
    assert got == ref
    if split:
        ref_errors["bad_attribute"] = ref_errors.get("bad_attribute", 0) + 1
    assert errors == ref_errors, (cut, split)


def check_nla_len(msg: bytes, index: int, nla_len: int) -> None:
    """One attribute's length overwritten: an impossible length is counted and ends the chain there."""
    attrs = attributes(msg)
    attr = attrs[index]
    rows, got, errors = decoded(with_nla_len(msg, attr, nla_len))
    assert rows == 1  # the message is kept: only its attribute chain is damaged
    if nla_len < 4 or attr.start + nla_len > len(msg):
        _, ref, ref_errors = decoded(keep_attributes(msg, attrs[:index]))
        ref_errors["bad_attribute"] = ref_errors.get("bad_attribute", 0) + 1
        assert got == ref
        assert errors == ref_errors, (index, nla_len)
    elif nla_len == attr.nla_len:
        assert (got, errors) == decoded(msg)[1:]


def count_walk_errors(res: WalkResult, errors: ErrorCounts) -> None:
    """Fold a WalkResult's problems into error counts."""
    if res.error == -1:
        errors["short_message"] += 1
    elif res.error == -2:
        errors["truncated_message"] += 1
    elif res.error == -3:
        errors["unknown_message_type"] += 1
    elif res.error > 0:
        errors["netlink_error"] += 1
    if res.interrupted:
        errors["dump_interrupted"] += 1


def parse_datagrams(
    datagrams: Iterable[bytes | bytearray | memoryview],
    errors: ErrorCounts,
    *,
    seq: int | None = None,
    pid: int | None = None,
) -> tuple[Parsed, bool]:
    """Walk and parse a list of received datagrams; returns (parsed, done_seen)."""
    parts: list[bytes] = []
    offsets: list[int] = []
    lengths: list[int] = []
    base = 0
    done = False
    for dgram in datagrams:
        data = bytes(dgram)
        res = walk_messages(data, 0, len(data))
        count_walk_errors(res, errors)
        offsets.extend(base + o for o in res.offsets)
        lengths.extend(res.lengths)
        padded = data + bytes((-len(data)) % 4)
        parts.append(padded)
        base += len(padded)
        if res.done:
            done = True
            break
    buf = b"".join(parts) + bytes(PAD)
    return parse_messages(buf, offsets, lengths, errors, seq=seq, pid=pid), done
