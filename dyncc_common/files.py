"""Atomic file replacement (stdlib only).

atomic_write(path, data): the bytes go to a temporary file in the same directory, which is
fsynced, given `mode` and renamed over `path`; the directory is fsynced after the rename, so
after a crash `path` holds either the old or the new content, never a mix.  The temporary file
is removed when anything fails.  OSError is raised to the caller, which words it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write"]


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace `path` with `data` atomically (temp file, fsync, chmod `mode`, rename, fsync dir)."""
    directory = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
