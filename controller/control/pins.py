"""`dyncc control pin | unpin | pins`: record, remove and list the operator's pins.

A pin is written to the store (controller/scoring/pins.py, `pins` table) and nothing is published
here: the next round holds it (decision `pin`) and a BBR pin reaches the edge in the POP's normal
signed config, a cubic pin by staying out of it.  `pin_problem` is the pure check (the prefix must
pass validation's per-prefix rule when pinned to BBR, the algorithm must be allowed); the commands
are the I/O around it and print one line each (`pins`: a table).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from controller.rollout.validate import ValidationPolicy, prefix_problem
from controller.scoring.explain import check_prefix
from controller.scoring.pins import PIN, UNPIN, Pin, load_pins, pins_frame, write_pin
from controller.store.pops import require_known_pops
from dyncc_common.errors import ConfigError

if TYPE_CHECKING:
    from controller.control.settings import PinSettings, PinsSettings, UnpinSettings
    from controller.store import Store


def pin_problem(prefix: str, algorithm: str, policy: ValidationPolicy) -> str | None:
    """Why the pin cannot be recorded, or None.  Pure.

    A cubic pin needs only a canonical prefix (it keeps the prefix out of the config); a pin to any
    other algorithm must be allowed and pass the per-prefix rule config validation applies (deny
    list, built-in ranges, length), else every round would drop it."""
    if algorithm == "cubic":
        return None
    if algorithm not in policy.allowed_algorithms:
        return f"--algorithm {algorithm} is not in --allowed-algorithms {','.join(sorted(policy.allowed_algorithms))}"
    problem = prefix_problem(prefix, policy)
    if problem is not None:
        return f"{prefix} cannot be pinned to {algorithm}: {problem[1]}"
    return None


def pin(store: Store, settings: PinSettings, policy: ValidationPolicy) -> int:
    prefix = check_prefix(settings.prefix)
    problem = pin_problem(prefix, settings.pin_algorithm, policy)
    if problem:
        raise ConfigError(problem)
    require_known_pops(store, [settings.pin_pop])
    write_pin(store, settings.pin_pop, prefix, PIN, settings.pin_algorithm, settings.who, settings.why)
    print(
        f"pinned {prefix} at {settings.pin_pop} to {settings.pin_algorithm} (by {settings.who}: {settings.why}); "
        "the next round applies it"
    )
    return 0


def unpin(store: Store, settings: UnpinSettings) -> int:
    prefix = check_prefix(settings.prefix)
    pinned = load_pins(store, settings.pin_pop).get((settings.pin_pop, prefix))
    if pinned is None:
        raise ConfigError(f"{prefix} is not pinned at POP {settings.pin_pop} ('dyncc control pins' lists the pins)")
    write_pin(store, settings.pin_pop, prefix, UNPIN, "", settings.who, settings.why)
    print(f"unpinned {prefix} at {settings.pin_pop} (was {pinned.algorithm}); the next round decides it")
    return 0


def list_pins(store: Store, settings: PinsSettings) -> int:
    pins: dict[tuple[str, str], Pin] = {}
    if settings.pins_pops:
        require_known_pops(store, list(settings.pins_pops))
        for pop in settings.pins_pops:
            pins.update(load_pins(store, pop))
    else:
        pins = load_pins(store)
    if not pins:
        print("no pins")
        return 0
    print(pins_frame(pins).to_string(index=False))
    return 0
