"""Test-only counterparts of dyncc.lab code: forms and undo steps the lab itself never needs.

* `map_text(delays_ms)` writes a delay map in the form dyncc.lab.delay.parse_map_text reads;
* `mean_size(objects)` is the expected body size of one request of a dyncc.lab.web catalogue;
* `delay_teardown_commands` / `shaping_teardown_commands` undo dyncc.lab.paths'
  delay_commands / shaping_commands (the lab deletes its namespaces instead).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dyncc.lab.paths import DELAY_DEV, DELAY_PREF, DELAY_TABLE, Command
from dyncc.lab.web import WebObject


def map_text(delays_ms: Mapping[str, float]) -> str:
    """The map file form of `delays_ms` (what parse_map_text reads)."""
    return "".join(f"{net} {float(ms)!r}\n" for net, ms in delays_ms.items())


def mean_size(objects: Sequence[WebObject]) -> float:
    """The expected body size of one request (bytes), by the weights."""
    total = sum(o.weight for o in objects)
    return sum(o.size * o.weight for o in objects) / total


def delay_teardown_commands(
    ns: str, devices: Sequence[str], *, tun: str = DELAY_DEV, table: int = DELAY_TABLE, pref: int = DELAY_PREF
) -> list[Command]:
    """Undo delay_commands (run each without failing on what is already gone)."""
    cmds = [
        ["ip", "-n", ns, fam, "rule", "del", "iif", dev, "lookup", str(table), "pref", str(pref)]
        for dev in devices
        for fam in ("-4", "-6")
    ]
    return [*cmds, ["ip", "-n", ns, "tuntap", "del", "dev", tun, "mode", "tun"]]


def shaping_teardown_commands(ns: str, dev: str) -> list[Command]:
    """Remove htb (with its classes and filters) and the loss filter from `dev`."""
    return [
        ["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"],
        ["tc", "-n", ns, "qdisc", "del", "dev", dev, "clsact"],
    ]
