"""Pinned BPF map I/O through libbpf (ctypes): the only module that reads or writes BPF maps.

`PinnedMap(path)` opens a map pinned in bpffs (`bpf_obj_get`; or, with `fd=`, a map a loaded
object holds, collector/agent/bpf/iterate.py), checks its type and key/value
sizes (`bpf_obj_get_info_by_fd`) and offers `items()` (a full dump: `bpf_map_get_next_key`
then `bpf_map_lookup_elem`), `put`/`delete` (one element each), `percpu_sums()` for a
per-CPU array of u64 counters, and `close()`.  Errors are BpfMapError naming the map and the
errno.  libbpf.so.1 comes with Debian's libbpf1 (a dependency of libbpf-dev).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

from dyncc_common.errors import DynccError

BPF_MAP_TYPE_ARRAY = 2
BPF_MAP_TYPE_PERCPU_ARRAY = 6
BPF_MAP_TYPE_LPM_TRIE = 11
BPF_ANY = 0
ENOENT = 2


class BpfMapError(DynccError, OSError):
    """A BPF map operation failed (no libbpf, not pinned, wrong layout, kernel error)."""


class _MapInfo(ctypes.Structure):
    """The leading fields of `struct bpf_map_info` (uapi/linux/bpf.h)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32),
        ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("name", ctypes.c_char * 16),
    ]


_lib: ctypes.CDLL | None = None


def libbpf() -> ctypes.CDLL:
    """libbpf.so.1, loaded once (BpfMapError when missing)."""
    global _lib
    if _lib is None:
        name = ctypes.util.find_library("bpf") or "libbpf.so.1"
        try:
            lib = ctypes.CDLL(name, use_errno=True)
        except OSError as exc:
            raise BpfMapError(f"cannot load libbpf ({name}): install libbpf1 / libbpf-dev") from exc
        vp, ui, u64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64
        lib.bpf_obj_get.argtypes = [ctypes.c_char_p]
        lib.bpf_map_update_elem.argtypes = [ui, vp, vp, u64]
        lib.bpf_map_lookup_elem.argtypes = [ui, vp, vp]
        lib.bpf_map_delete_elem.argtypes = [ui, vp]
        lib.bpf_map_get_next_key.argtypes = [ui, vp, vp]
        lib.bpf_obj_get_info_by_fd.argtypes = [ui, vp, ctypes.POINTER(ctypes.c_uint32)]
        lib.libbpf_num_possible_cpus.argtypes = []
        _lib = lib
    return _lib


def _errno(rc: int) -> int:
    """libbpf 1.x returns -errno; older builds return -1 and set errno."""
    return -rc if rc < -1 else (ctypes.get_errno() or -rc)


class PinnedMap:
    def __init__(self, path: Path, *, map_type: int, key_size: int, value_size: int, fd: int | None = None) -> None:
        """Open the map pinned at `path`, or (`fd` given) a duplicate of `fd`, `path` then naming it."""
        self.path = path
        self.name = path.name
        self._lib = libbpf()
        if fd is not None:
            fd = os.dup(fd)
        else:
            fd = self._lib.bpf_obj_get(os.fsencode(path))
            if fd < 0:
                code = _errno(fd)
                raise BpfMapError(f"cannot open pinned map {path}: {os.strerror(code)}")
        self.fd = fd
        info = _MapInfo()
        size = ctypes.c_uint32(ctypes.sizeof(info))
        rc = self._lib.bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size))
        if rc != 0:
            self.close()
            raise BpfMapError(f"cannot read map info of {path}: {os.strerror(_errno(rc))}")
        if (info.type, info.key_size) != (map_type, key_size) or info.value_size != value_size:
            self.close()
            raise BpfMapError(
                f"pinned map {path} has type {info.type} key {info.key_size}B value {info.value_size}B, "
                f"expected type {map_type} key {key_size}B value {value_size}B (another program version?)"
            )
        self.key_size, self.value_size, self.max_entries = key_size, value_size, info.max_entries
        self.id = info.id

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> PinnedMap:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fail(self, what: str, rc: int) -> BpfMapError:
        return BpfMapError(f"{what} in {self.name}: {os.strerror(_errno(rc))}")

    def keys(self) -> list[bytes]:
        out: list[bytes] = []
        current: ctypes.Array[ctypes.c_char] | None = None
        nxt = ctypes.create_string_buffer(self.key_size)
        while True:
            rc = self._lib.bpf_map_get_next_key(self.fd, current, nxt)
            if rc != 0:
                if _errno(rc) == ENOENT:
                    return out
                raise self._fail("iterating keys", rc)
            out.append(nxt.raw)
            current = ctypes.create_string_buffer(nxt.raw, self.key_size)

    def items(self) -> dict[bytes, bytes]:
        """Every key and value (a key deleted concurrently is skipped)."""
        out: dict[bytes, bytes] = {}
        value = ctypes.create_string_buffer(self.value_size)
        for key in self.keys():
            rc = self._lib.bpf_map_lookup_elem(self.fd, key, value)
            if rc == 0:
                out[key] = value.raw
            elif _errno(rc) != ENOENT:
                raise self._fail("lookup", rc)
        return out

    def put(self, key: bytes, value: bytes) -> None:
        rc = self._lib.bpf_map_update_elem(self.fd, key, value, BPF_ANY)
        if rc != 0:
            raise self._fail(f"update of key {key.hex()}", rc)

    def delete(self, key: bytes) -> None:
        rc = self._lib.bpf_map_delete_elem(self.fd, key)
        if rc != 0 and _errno(rc) != ENOENT:
            raise self._fail(f"delete of key {key.hex()}", rc)

    def percpu_sums(self) -> list[int]:
        """A per-CPU array of u64: each index summed over the possible CPUs."""
        cpus = self._lib.libbpf_num_possible_cpus()
        if cpus <= 0:
            raise self._fail("counting CPUs", cpus)
        values = (ctypes.c_uint64 * cpus)()
        sums: list[int] = []
        for index in range(self.max_entries):
            key = ctypes.c_uint32(index)
            rc = self._lib.bpf_map_lookup_elem(self.fd, ctypes.byref(key), values)
            if rc != 0:
                raise self._fail(f"lookup of counter {index}", rc)
            sums.append(sum(values))
        return sums
