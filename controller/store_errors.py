"""The store's error type, importable without numpy (the CLI catches it for every command)."""

from __future__ import annotations


class StoreError(Exception):
    """A store operation failed; str() is a one-line reason for a person."""
