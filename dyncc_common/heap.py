"""Keep freed large buffers in the process heap instead of returning them to the kernel.

glibc serves allocations above M_MMAP_THRESHOLD (128 KiB, rising to at most
32 MiB) with fresh mmap()s and unmaps them on free, so a loop that builds a
50 MB buffer per cycle page-faults all of it again every cycle, and filling fresh pages
costs several times more than reusing resident ones (docs/performance.md).  Long-running
commands that cycle through large buffers (ingest flushes, collector polls)
call keep_freed_memory() once at start: their steady-state heap then stays
resident and is reused.  The working set is bounded by the commands' own
limits (flush sizes, poll batch caps), so the trade is memory that stays
mapped at its high-water mark.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("dyncc")

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_THRESHOLD = 1 << 30


def keep_freed_memory(prefault: int = 0) -> bool:
    """Raise glibc's mmap and trim thresholds to 1 GiB; False (and no change) when not glibc.

    prefault > 0 also touches that many bytes of heap once and frees them, so
    the first cycles find resident memory too (they would page-fault all of
    their buffers otherwise).
    """
    try:
        libc = ctypes.CDLL(None)  # the process's own symbols (find_library would run ldconfig)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(_M_MMAP_THRESHOLD, _THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, _THRESHOLD))
    if not ok:
        log.debug("mallopt refused the thresholds; large buffers are mmapped per use")
        return False
    if prefault > 0:
        malloc, free, memset = libc.malloc, libc.free, libc.memset
        malloc.restype = ctypes.c_void_p
        malloc.argtypes = [ctypes.c_size_t]
        free.argtypes = [ctypes.c_void_p]
        memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
        memset.restype = ctypes.c_void_p
        block = malloc(prefault)
        if block:
            memset(block, 0, prefault)
            free(block)
    return True
