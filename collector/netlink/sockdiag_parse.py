"""Pure parsing of NETLINK_SOCK_DIAG dump replies into numpy columns (no I/O).

Two steps:
  * `walk_messages` follows the nlmsghdr chain of one received datagram (a short
    Python loop over uint32 words: it only reads each message's length and
    type) and records where the SOCK_DIAG_BY_FAMILY messages start;
  * `parse_messages` decodes all recorded messages at once, vectorized: the
    fixed nlmsghdr + inet_diag_msg part is gathered into a structured array,
    the attribute chains are walked for all messages in parallel (one numpy
    step per attribute position), then each attribute's decoder module
    (attr_tcp_info, attr_cong, attr_bbr_info, attr_skmeminfo) turns the
    payload offsets and lengths it found into columns, again vectorised.

Nothing from the wire is trusted: every length is bounds-checked, malformed
messages or attributes are counted by kind in an `ErrorCounts` and skipped,
and no input makes these functions raise.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from collector.netlink import attr_bbr_info, attr_cong, attr_skmeminfo, attr_tcp_info
from collector.netlink.abi import NLM_F_DUMP_INTR, NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN
from collector.netlink.attr_bbr_info import INET_DIAG_BBRINFO
from collector.netlink.attr_cong import INET_DIAG_CONG
from collector.netlink.attr_skmeminfo import INET_DIAG_SKMEMINFO
from collector.netlink.attr_tcp_info import INET_DIAG_INFO, TCP_INFO_WORDS
from collector.netlink.gather import records
from collector.netlink.sockdiag import SOCK_DIAG_BY_FAMILY, Buf

DIAG_MSG_LEN = NLMSG_HDRLEN + 72  # nlmsghdr + struct inet_diag_msg

INET_DIAG_VEGASINFO = 3

MAX_ATTRS = 64  # attributes walked per message before giving up
#: Zero bytes a parse buffer must carry past its last message (gathers read fixed widths).
PAD = 4 * TCP_INFO_WORDS + 64

#: Error kinds (the `kind` of ParseErrorCount).
ERROR_KINDS = (
    "short_message",  # nlmsg_len below the header size
    "truncated_message",  # nlmsg_len runs past the received data
    "netlink_error",  # NLMSG_ERROR in the dump
    "unknown_message_type",
    "seq_mismatch",
    "pid_mismatch",
    "dump_interrupted",  # NLM_F_DUMP_INTR: the socket tables changed during the dump
    "bad_family",
    "bad_attribute",  # nla_len < 4, past the message end, or a header cut short
    "too_many_attributes",
    "missing_tcp_info",
    "short_bbr_info",
    "bad_cc_name",
)

HEADER_DTYPE = np.dtype(
    {
        "names": [
            "nlmsg_len", "nlmsg_type", "nlmsg_flags", "nlmsg_seq", "nlmsg_pid",
            "family", "state", "timer", "retrans", "sport", "dport", "src", "dst",
            "ifindex", "cookie", "expires", "rqueue", "wqueue", "uid", "inode",
        ],
        "formats": [
            "=u4", "=u2", "=u2", "=u4", "=u4",
            "u1", "u1", "u1", "u1", ">u2", ">u2", "(16,)u1", "(16,)u1",
            "=u4", "=u8", "=u4", "=u4", "=u4", "=u4", "=u4",
        ],
        "offsets": [0, 4, 6, 8, 12, 16, 17, 18, 19, 20, 22, 24, 40, 56, 60, 68, 72, 76, 80, 84],
        "itemsize": DIAG_MSG_LEN,
    }
)  # fmt: skip


class ErrorCounts(Counter[str]):
    """Parse errors by kind (a Counter: missing kinds read as 0)."""


@dataclass
class ChunkWalk:
    """SOCK_DIAG messages found in a run of datagrams, and how the run ended."""

    offsets: np.ndarray
    lengths: np.ndarray
    done: bool = False
    error: int = 0  # positive errno from NLMSG_ERROR / NLMSG_DONE, 0 if none
    interrupted: bool = False


def tiled_datagrams(u32: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, ...]:
    """Datagrams that are whole runs of same-length SOCK_DIAG messages (the usual dump datagram).

    Returns (tiled mask per datagram, their message offsets, lengths).  A
    datagram qualifies only when every message in it has the first one's
    length (a multiple of 4 that divides the datagram), type SOCK_DIAG_BY_FAMILY
    and no DUMP_INTR flag: exactly what the walk would find there, with no error.
    """
    first = u32[starts >> 2].astype(np.int64)
    span = ends - starts
    ok = (first >= NLMSG_HDRLEN) & (first % 4 == 0)
    ok &= span % np.where(ok, first, 1) == 0
    if not ok.any():
        return ok, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    idx = np.flatnonzero(ok)
    count = span[idx] // first[idx]
    total = int(count.sum())
    group = np.repeat(np.arange(idx.shape[0]), count)
    within = np.arange(total) - np.repeat(np.cumsum(count) - count, count)
    length = first[idx][group]
    off = starts[idx][group] + within * length
    w = off >> 2
    tf = u32[w + 1]
    good = (u32[w] == length) & ((tf & 0xFFFF) == SOCK_DIAG_BY_FAMILY) & ((tf & (NLM_F_DUMP_INTR << 16)) == 0)
    bad_groups = np.zeros(idx.shape[0], dtype=bool)
    bad_groups[group[~good]] = True
    ok[idx[bad_groups]] = False
    keep = ~bad_groups[group]
    return ok, off[keep], length[keep]


def walk_datagrams(buf: Buf, starts: np.ndarray, ends: np.ndarray, errors: ErrorCounts) -> ChunkWalk:
    """walk_messages over many datagrams at once, in lock step (vectorized); never raises.

    Datagram j is buf[starts[j]:ends[j]] (starts 4-aligned, inside buf).  Each
    datagram's chain stops at its first malformed header, like walk_messages.
    Message offsets come back in buffer order.
    """
    size = len(buf) - len(buf) % 4
    starts = np.asarray(starts, dtype=np.int64).reshape(-1)
    ends = np.minimum(np.asarray(ends, dtype=np.int64).reshape(-1), size)
    keep = (starts >= 0) & (starts % 4 == 0) & (starts < ends)
    starts, ends = starts[keep], ends[keep]
    u32 = np.frombuffer(buf, dtype=np.uint32, count=size // 4)
    found_off: list[np.ndarray] = []
    found_len: list[np.ndarray] = []
    if starts.size:
        tiled, tiled_off, tiled_len = tiled_datagrams(u32, starts, ends)
        if tiled.any():
            found_off.append(tiled_off)
            found_len.append(tiled_len)
            starts, ends = starts[~tiled], ends[~tiled]
    done = False
    error = 0
    interrupted = False
    cur = starts.copy()
    active = np.nonzero(cur + NLMSG_HDRLEN <= ends)[0]
    while active.size:
        c = cur[active]
        w = c >> 2
        length = u32[w].astype(np.int64)
        tf = u32[w + 1]
        mtype = tf & 0xFFFF
        short = length < NLMSG_HDRLEN
        trunc = ~short & (c + length > ends[active])
        stop = short | trunc
        if short.any():
            errors["short_message"] += int(np.count_nonzero(short))
        if trunc.any():
            errors["truncated_message"] += int(np.count_nonzero(trunc))
        good = ~stop
        if ((tf & np.uint32(NLM_F_DUMP_INTR << 16)) != 0)[good].any():
            interrupted = True
        diag = good & (mtype == SOCK_DIAG_BY_FAMILY)
        found_off.append(c[diag])
        found_len.append(length[diag])
        is_done = good & (mtype == NLMSG_DONE)
        is_err = good & (mtype == NLMSG_ERROR)
        other = good & ~diag & ~is_done & ~is_err
        if other.any():
            errors["unknown_message_type"] += int(np.count_nonzero(other))
        if is_done.any() or is_err.any():
            for k in np.nonzero(is_done | is_err)[0].tolist():
                pos, ln = int(c[k]), int(length[k])
                status = int(u32[(pos >> 2) + 4]) if ln >= NLMSG_HDRLEN + 4 else 0
                signed = status - (1 << 32) if status & 0x80000000 else status
                if mtype[k] == NLMSG_DONE:
                    done = True
                    stop[k] = True
                    if signed < 0:
                        error = error or -signed
                elif signed != 0:
                    done = True
                    stop[k] = True
                    error = error or abs(signed)
        nxt = c + ((length + 3) & ~3)
        cur[active] = nxt
        active = active[~stop & (nxt + NLMSG_HDRLEN <= ends[active])]
    if error:
        errors["netlink_error"] += 1
    if interrupted:
        errors["dump_interrupted"] += 1
    offs = np.concatenate(found_off) if found_off else np.zeros(0, dtype=np.int64)
    lens = np.concatenate(found_len) if found_len else np.zeros(0, dtype=np.int64)
    if len(found_off) > 1:
        order = np.argsort(offs, kind="stable")
        offs, lens = offs[order], lens[order]
    return ChunkWalk(offsets=offs, lengths=lens, done=done, error=error, interrupted=interrupted)


@dataclass
class Parsed:
    """Columns of one parsed set of messages (names as in TcpInfoBatch)."""

    columns: dict[str, np.ndarray]
    cc_names: list[str]  # cc_index values index this table
    rows: int


def _to_mapped16(raw: np.ndarray, is_v4: np.ndarray) -> np.ndarray:
    """16-byte addresses; IPv4 rows (first 4 bytes) become ::ffff:a.b.c.d."""
    if not is_v4.any():
        return np.ascontiguousarray(raw, dtype=np.uint8)
    if is_v4.all():  # one dump per family: the usual case
        out = np.zeros((raw.shape[0], 16), dtype=np.uint8)
        out[:, 10:12] = 0xFF
        out[:, 12:16] = raw[:, 0:4]
        return out
    out = np.array(raw, dtype=np.uint8, copy=True)
    v4 = out[is_v4]
    v4[:, 12:16] = v4[:, 0:4]
    v4[:, 0:10] = 0
    v4[:, 10:12] = 0xFF
    out[is_v4] = v4
    return out


_LAYOUT_TRIES = 4  # layouts tried per parse (sockets of one kernel come in a few shapes)


def _attr_layout(u32: np.ndarray, off: int, length: int) -> list[tuple[int, int]] | None:
    """(offset in the message, header word) of each attribute of one message; None if malformed.

    Follows the same rules as the lock-step walk, so a message whose words match
    the layout gets exactly the positions that walk would find.
    """
    layout: list[tuple[int, int]] = []
    rel = DIAG_MSG_LEN
    while rel + 4 <= length:
        if len(layout) >= MAX_ATTRS:
            return None
        word = int(u32[(off + rel) >> 2])
        nla_len = word & 0xFFFF
        if nla_len < 4 or rel + nla_len > length:
            return None
        layout.append((rel, word))
        rel += (nla_len + 3) & ~3
    if 0 < length - rel < 4:
        return None  # an attribute header cut short: left to the walk, which counts it
    return layout


def apply_layouts(
    u32: np.ndarray,
    offs: np.ndarray,
    lens: np.ndarray,
    found: dict[int, np.ndarray],
    flen: dict[int, np.ndarray],
) -> np.ndarray:
    """Fill found/flen for messages matching the layout of a not yet matched message.

    Returns the indexes of the messages left for the lock-step walk.
    """
    todo = np.arange(offs.shape[0])
    for _ in range(_LAYOUT_TRIES):
        if todo.size < 64:
            break
        first = int(todo[0])
        length = int(lens[first])
        layout = _attr_layout(u32, int(offs[first]), length)
        if layout is None:
            break
        sel = np.flatnonzero(lens[todo] == length)
        base = offs[todo[sel]] >> 2
        match = np.ones(sel.shape[0], dtype=bool)
        for rel, word in layout:
            match &= u32[base + (rel >> 2)] == np.uint32(word)
        pos: dict[int, tuple[int, int]] = {}
        for rel, word in layout:
            t = (word >> 16) & 0x3FFF
            if t in found:
                pos[t] = (rel + 4, (word & 0xFFFF) - 4)  # the last one wins, as in the walk
        if sel.shape[0] == todo.shape[0] == offs.shape[0] and match.all():
            # every message has this layout (the usual chunk): whole-array writes, no indexing
            for t, (rel, size) in pos.items():
                np.add(offs, rel, out=found[t])
                flen[t].fill(size)
            return todo[:0]
        taken = np.zeros(todo.shape[0], dtype=bool)
        taken[sel[match]] = True
        hit = todo[taken]
        for t, (rel, size) in pos.items():
            found[t][hit] = offs[hit] + rel
            flen[t][hit] = size
        todo = todo[~taken]
    return todo


def walk_attributes(
    u32: np.ndarray,
    offs: np.ndarray,
    lens: np.ndarray,
    todo: np.ndarray,
    found: dict[int, np.ndarray],
    flen: dict[int, np.ndarray],
    errors: ErrorCounts,
) -> None:
    """Walk the attribute chains of the messages `todo` (row indices) in lock step, at most
    MAX_ATTRS steps: each attribute type in `found` gets its payload offset and length (the last
    one wins).  Bad, cut-short and surplus attributes are counted in `errors`."""
    cur = offs + DIAG_MSG_LEN
    end = offs + lens
    active = todo[cur[todo] + 4 <= end[todo]]
    steps = 0
    while active.size and steps < MAX_ATTRS:
        steps += 1
        c = cur[active]
        word = u32[c >> 2]
        nla_len = (word & 0xFFFF).astype(np.int64)
        nla_type = (word >> 16) & 0x3FFF
        bad = (nla_len < 4) | (c + nla_len > end[active])
        if bad.any():
            errors["bad_attribute"] += int(np.count_nonzero(bad))
        okay = ~bad
        for t in found:
            sel = okay & (nla_type == t)
            if sel.any():
                rows_sel = active[sel]
                found[t][rows_sel] = c[sel] + 4
                flen[t][rows_sel] = nla_len[sel] - 4
        nxt = c + ((nla_len + 3) & ~3)
        nxt[bad] = end[active][bad]
        cur[active] = nxt
        active = active[nxt + 4 <= end[active]]
    if active.size:
        errors["too_many_attributes"] += int(active.size)
    left = end[todo] - cur[todo]  # 1-3 bytes after the chain: a header cut short (kernel chains end exactly)
    cut_short = (left > 0) & (left < 4)
    if cut_short.any():
        errors["bad_attribute"] += int(np.count_nonzero(cut_short))


def parse_messages(
    buf: Buf,
    offsets: Iterable[int] | np.ndarray,
    lengths: Iterable[int] | np.ndarray,
    errors: ErrorCounts,
    *,
    seq: int | None = None,
    pid: int | None = None,
) -> Parsed:
    """Decode the SOCK_DIAG_BY_FAMILY messages at `offsets` of `buf` into columns.

    Offsets must be 4-aligned and each message must lie inside buf (as
    walk_messages guarantees); anything else is counted and dropped.
    """
    offs = np.asarray(offsets, dtype=np.int64).reshape(-1)
    lens = np.asarray(lengths, dtype=np.int64).reshape(-1)
    n_in = min(offs.shape[0], lens.shape[0])
    offs, lens = offs[:n_in], lens[:n_in]
    size = len(buf)
    ok = (offs >= 0) & (offs % 4 == 0) & (lens >= 0) & (offs + lens <= size)
    if not ok.all():
        errors["truncated_message"] += int(np.count_nonzero(~ok))
    short = ok & (lens < DIAG_MSG_LEN)
    if short.any():
        errors["short_message"] += int(np.count_nonzero(short))
    keep = ok & ~short
    offs, lens = offs[keep], lens[keep]

    # a padded, 4-aligned copy only when the caller's buffer lacks the padding
    max_end = int((offs + lens).max()) if offs.size else 0
    if size < max_end + PAD or size % 4:
        padded = bytearray(((max(size, max_end) + 3) & ~3) + PAD)
        padded[:size] = buf
        base = np.frombuffer(padded, dtype=np.uint8)
    else:
        base = np.frombuffer(buf, dtype=np.uint8, count=size - size % 4)
    u32 = base.view(np.uint32)

    hdr = records(base, DIAG_MSG_LEN // 4)[offs >> 2].view(HEADER_DTYPE).reshape(-1)
    good = np.ones(hdr.shape[0], dtype=bool)
    if seq is not None:
        bad = hdr["nlmsg_seq"] != np.uint32(seq & 0xFFFFFFFF)
        errors["seq_mismatch"] += int(np.count_nonzero(bad))
        good &= ~bad
    if pid is not None:
        bad = hdr["nlmsg_pid"] != np.uint32(pid & 0xFFFFFFFF)
        errors["pid_mismatch"] += int(np.count_nonzero(bad & good))
        good &= ~bad
    fam = hdr["family"]
    bad = (fam != 2) & (fam != 10)
    errors["bad_family"] += int(np.count_nonzero(bad & good))
    good &= ~bad
    if not good.all():
        hdr, offs, lens = hdr[good], offs[good], lens[good]
    rows = hdr.shape[0]

    # ---- attributes: messages laid out like an earlier one (same length, same attribute
    # headers at the same places) take its positions; the rest walk their chains in lock step
    found = {
        t: np.full(rows, -1, dtype=np.int64)
        for t in (INET_DIAG_INFO, INET_DIAG_CONG, INET_DIAG_BBRINFO, INET_DIAG_SKMEMINFO)
    }
    flen = {t: np.zeros(rows, dtype=np.int64) for t in found}
    todo = apply_layouts(u32, offs, lens, found, flen)
    walk_attributes(u32, offs, lens, todo, found, flen, errors)

    cols: dict[str, np.ndarray] = {}
    family = hdr["family"].astype(np.uint32)
    is_v4 = family == 2
    cols["family"] = family
    cols["src_addr"] = _to_mapped16(hdr["src"], is_v4)
    cols["dst_addr"] = _to_mapped16(hdr["dst"], is_v4)
    cols["src_port"] = hdr["sport"].astype(np.uint32)
    cols["dst_port"] = hdr["dport"].astype(np.uint32)
    cols["cookie"] = hdr["cookie"].astype(np.uint64)
    cols["state"] = hdr["state"].astype(np.uint32)
    cols["uid"] = hdr["uid"].astype(np.uint32)
    cols["inode"] = hdr["inode"].astype(np.uint32)

    # ---- one decoder per attribute, each given the payload offsets (-1 = absent) and lengths
    cols.update(attr_tcp_info.decode(base, found[INET_DIAG_INFO], flen[INET_DIAG_INFO], errors))
    cols["cc_index"], cc_names = attr_cong.decode(base, found[INET_DIAG_CONG], flen[INET_DIAG_CONG], errors)
    cols.update(attr_bbr_info.decode(base, found[INET_DIAG_BBRINFO], flen[INET_DIAG_BBRINFO], errors))
    cols.update(attr_skmeminfo.decode(base, found[INET_DIAG_SKMEMINFO], flen[INET_DIAG_SKMEMINFO]))
    return Parsed(columns=cols, cc_names=cc_names, rows=rows)
