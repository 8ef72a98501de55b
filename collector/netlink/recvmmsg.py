"""recvmmsg(2) for a netlink dump: many datagrams per call, the GIL released for all of them.

A netlink dump advances only inside the reader's receive calls: each recvmsg
copies one datagram out and has the kernel fill the next.  A Python thread
doing one recv_into() per datagram must win the GIL back after every one, so
a thread parsing at the same time slows the dump itself.  `MultiRecv.recv`
makes one recvmmsg call (through ctypes, which drops the GIL for the call)
that receives up to `count` datagrams into consecutive slots of `stride`
bytes of a caller's buffer: MSG_WAITFORONE blocks for the first datagram
only, then takes what the kernel has (during a dump, the next datagram is
always ready, so a call usually fills every slot or ends with the dump).

Contract: `recv(buf, offset, count, stride)` writes datagram i at
buf[offset + i*stride:], at most `stride` bytes of it, and returns the byte
count of each datagram received (at least one); a datagram longer than
`stride` is cut to it (its messages then fail the parser's length checks, as
with recv_into).  It raises OSError (EINTR included) like socket.recv_into.
The buffer must be writable, exported by the buffer protocol, and stay alive
and unmoved during the call (mmap chunk buffers).
`MultiRecv.available()` is False where recvmmsg cannot be called (no Linux
libc); callers fall back to recv_into.
"""

from __future__ import annotations

import ctypes
import os
import socket
from typing import Any

MSG_WAITFORONE = 0x10000


class _IoVec(ctypes.Structure):
    _fields_ = (("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t))


class _MsgHdr(ctypes.Structure):
    _fields_ = (
        ("msg_name", ctypes.c_void_p),
        ("msg_namelen", ctypes.c_uint32),
        ("msg_iov", ctypes.POINTER(_IoVec)),
        ("msg_iovlen", ctypes.c_size_t),
        ("msg_control", ctypes.c_void_p),
        ("msg_controllen", ctypes.c_size_t),
        ("msg_flags", ctypes.c_int),
    )


class _MMsgHdr(ctypes.Structure):
    _fields_ = (("msg_hdr", _MsgHdr), ("msg_len", ctypes.c_uint))


_recvmmsg: Any = None
_probed = False


def _function() -> Any:
    """libc's recvmmsg with its argument types, or None."""
    global _recvmmsg, _probed
    if not _probed:
        _probed = True
        try:
            fn = ctypes.CDLL(None, use_errno=True).recvmmsg
        except (AttributeError, OSError):
            return None
        fn.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p)
        fn.restype = ctypes.c_int
        _recvmmsg = fn
    return _recvmmsg


class MultiRecv:
    """recvmmsg on one socket, with message headers for up to `limit` datagrams per call."""

    def __init__(self, sock: socket.socket, limit: int) -> None:
        fn = _function()
        if fn is None:
            raise OSError("recvmmsg is not available")
        self._fn = fn
        self._fd = sock.fileno()
        self.limit = max(int(limit), 1)
        self._iov = (_IoVec * self.limit)()
        self._msgs = (_MMsgHdr * self.limit)()
        size = ctypes.sizeof(_IoVec)
        base = ctypes.addressof(self._iov)
        for i in range(self.limit):
            hdr = self._msgs[i].msg_hdr
            hdr.msg_iov = ctypes.cast(base + i * size, ctypes.POINTER(_IoVec))
            hdr.msg_iovlen = 1
        self._layout: tuple[int, int, int] | None = None  # (address, count, stride) the iovecs hold

    @staticmethod
    def available() -> bool:
        return _function() is not None

    def recv(self, buf: Any, offset: int, count: int, stride: int) -> list[int]:
        """Receive 1..count datagrams into buf[offset + i*stride:]; their lengths."""
        count = min(count, self.limit)
        if count < 1 or offset < 0 or offset + count * stride > len(buf):
            raise ValueError("recvmmsg slots outside the buffer")
        anchor = ctypes.c_char.from_buffer(buf, offset)  # holds the export during the call
        address = ctypes.addressof(anchor)
        if self._layout != (address, count, stride):
            iov = self._iov
            for i in range(count):
                iov[i].iov_base = address + i * stride
                iov[i].iov_len = stride
            self._layout = (address, count, stride)
        got = self._fn(self._fd, self._msgs, count, MSG_WAITFORONE, None)
        del anchor
        if got < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        msgs = self._msgs
        return [msgs[i].msg_len for i in range(got)]
