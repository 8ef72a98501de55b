"""dyncc's version: the installed distribution's metadata (pyproject.toml `version`).

`dyncc --version` prints it and every controller round records it with its settings
(sql/migrations/011_round_settings.sql).  Stdlib only; importlib.metadata is imported on
first use, not at `dyncc` start-up.
"""

from __future__ import annotations

from functools import cache

__all__ = ["UNKNOWN", "dyncc_version"]

DISTRIBUTION = "dyncc"
UNKNOWN = "unknown"  # run from a checkout that was never installed (no package metadata)


@cache
def dyncc_version() -> str:
    """The version of the installed `dyncc` distribution, or UNKNOWN without its metadata."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return UNKNOWN
