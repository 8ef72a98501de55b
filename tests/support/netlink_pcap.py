"""Test-only reader of netlink captures: classic pcap files of LINKTYPE_NETLINK (253) packets.

Contract: `read_pcap(data)` returns every record of a little- or big-endian,
micro- or nanosecond pcap file as a `NetlinkPacket` (direction, netlink
protocol, the netlink payload with the 16-byte cooked header removed, and
whether the capture cut it short).  Anything else (pcapng, another link type,
a record running past the file) raises `PcapError`: these are fixtures, a bad
one should fail loudly.

The LINKTYPE_NETLINK pseudo-header (tcpdump's linktype table) is big-endian:
    u16 packet type (0 = to us, 4 = outgoing), u16 ARPHRD_NETLINK (824),
    u16 address length, 8 bytes address, u16 netlink protocol (4 = NETLINK_SOCK_DIAG).

`write_pcap(packets)` writes the same format (little-endian, microseconds), for
recordings of this machine's kernel.

`rtattr(data)` reads a single-attribute file (u16 rta_len, u16 rta_type, payload),
the format of xtcp2's `attribute_*` fixtures.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

LINKTYPE_NETLINK = 253
ARPHRD_NETLINK = 824
COOKED_LEN = 16
PACKET_HOST = 0  # a datagram the kernel sent to the capturing socket's owner
PACKET_OUTGOING = 4  # a request sent to the kernel

_MAGICS = {
    b"\xd4\xc3\xb2\xa1": "<",  # microsecond, little-endian
    b"\xa1\xb2\xc3\xd4": ">",
    b"\x4d\x3c\xb2\xa1": "<",  # nanosecond
    b"\xa1\xb2\x3c\x4d": ">",
}
_PCAPNG = b"\x0a\x0d\x0d\x0a"


class PcapError(ValueError):
    """The file is not a classic pcap of netlink packets, or is cut short."""


@dataclass(frozen=True)
class NetlinkPacket:
    pkttype: int
    protocol: int
    payload: bytes  # netlink messages, cooked header removed
    truncated: bool  # captured length below the original length


def read_pcap(data: bytes) -> list[NetlinkPacket]:
    """Every record of a LINKTYPE_NETLINK pcap; raises PcapError on anything unexpected."""
    if data[:4] == _PCAPNG:
        raise PcapError("pcapng is not supported (no such fixture); convert with editcap -F pcap")
    order = _MAGICS.get(data[:4])
    if order is None or len(data) < 24:
        raise PcapError(f"not a pcap file (magic {data[:4].hex()})")
    _major, _minor, _zone, _sigfigs, _snaplen, linktype = struct.unpack_from(order + "HHiIII", data, 4)
    if linktype & 0xFFFF != LINKTYPE_NETLINK:
        raise PcapError(f"link type {linktype & 0xFFFF}, expected LINKTYPE_NETLINK ({LINKTYPE_NETLINK})")
    rec = struct.Struct(order + "IIII")
    packets: list[NetlinkPacket] = []
    pos = 24
    while pos < len(data):
        if pos + rec.size > len(data):
            raise PcapError(f"record header cut short at byte {pos}")
        _sec, _frac, incl, orig = rec.unpack_from(data, pos)
        pos += rec.size
        if pos + incl > len(data):
            raise PcapError(f"record at byte {pos} runs past the end of the file")
        frame = data[pos : pos + incl]
        pos += incl
        if len(frame) < COOKED_LEN:
            raise PcapError(f"record of {len(frame)} bytes has no cooked header")
        pkttype, hatype, _alen = struct.unpack_from(">HHH", frame, 0)
        (protocol,) = struct.unpack_from(">H", frame, 14)
        if hatype != ARPHRD_NETLINK:
            raise PcapError(f"cooked header hatype {hatype}, expected ARPHRD_NETLINK ({ARPHRD_NETLINK})")
        packets.append(NetlinkPacket(pkttype, protocol, frame[COOKED_LEN:], incl < orig))
    return packets


def write_pcap(packets: list[NetlinkPacket], stamps: list[float] | None = None) -> bytes:
    """A little-endian microsecond pcap of LINKTYPE_NETLINK records (whole packets, not truncated)."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, LINKTYPE_NETLINK)]
    for i, pkt in enumerate(packets):
        stamp = stamps[i] if stamps is not None else 0.0
        sec = int(stamp)
        usec = min(round((stamp - sec) * 1e6), 999_999)
        cooked = struct.pack(">HHH8sH", pkt.pkttype, ARPHRD_NETLINK, 0, bytes(8), pkt.protocol)
        frame = cooked + pkt.payload
        out.append(struct.pack("<IIII", sec, usec, len(frame), len(frame)))
        out.append(frame)
    return b"".join(out)


def rtattr(data: bytes) -> tuple[int, bytes]:
    """(rta_type, payload) of a file holding one netlink attribute (host = little-endian order)."""
    if len(data) < 4:
        raise PcapError(f"attribute file of {len(data)} bytes")
    rta_len, rta_type = struct.unpack_from("<HH", data, 0)
    if not 4 <= rta_len <= len(data):
        raise PcapError(f"rta_len {rta_len} outside the file's {len(data)} bytes")
    return rta_type & 0x3FFF, data[4:rta_len]
