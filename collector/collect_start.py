"""Start-up and exit of a `dyncc collect` process (no numpy here: this runs before it loads).

- start_prefetch: for --once, fork the dump helper (collect_prefetch) from
  the not yet validated settings; any problem just means no prefetch (the
  real configuration check and the in-process dump report it).
- process_is_dyncc: True only when this process is the `dyncc` command itself
  (not a test or another program calling the CLI in-process).
- exit_now: end a finished one-shot run without the interpreter's teardown.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

from collector.collect_config import parse_states
from collector.collect_netlink import namespaces_to_dump, state_mask
from collector.collect_prefetch import Prefetch
from collector.daemon import ConfigError


def start_prefetch(raw: dict[str, Any]) -> Prefetch | None:
    """Fork the dump helper for these raw settings (defaults < TOML < flags), or None."""
    try:
        states = parse_states(raw["state"])
        if not states:
            return None
        netns = [str(n) for n in raw["netns"]]
        if netns and raw["all_netns"]:
            return None  # a configuration error, reported later
        namespaces = namespaces_to_dump(netns, bool(raw["all_netns"]))
    except (ConfigError, TypeError, ValueError, OSError):
        return None
    return Prefetch.start(namespaces, state_mask(states))


def process_is_dyncc() -> bool:
    """Whether the running program is the dyncc CLI (the console script or `python -m controller.cli`)."""
    main = sys.modules.get("__main__")
    entry = getattr(main, "main", None)
    if getattr(entry, "__module__", None) == "controller.cli":
        return True
    spec = getattr(main, "__spec__", None)
    return getattr(spec, "name", None) == "controller.cli"


def exit_now(code: int) -> None:
    """Flush logs and stdio, then _exit(code): only once every sink is closed and checked."""
    import logging  # loaded by then; not at import, which runs before the dump helper is forked

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed, or its reader went away
            stream.flush()
    os._exit(code)
