"""The Python requirements of one dyncc Debian package, read from pyproject.toml.

`python3 debian/requirements.py edge|central` prints, one a line, the requirement strings of
pyproject.toml's `dependencies` that the package's commands import: dyncc-edge runs `dyncc
collect` and `dyncc agent` (collector/, schemas/, dyncc_common/), dyncc-central the controller's
commands (controller/, schemas/, dyncc_common/).  `drop` prints the top-level packages of the
dyncc wheel the package leaves out.  Stdlib only (it runs before any environment exists).
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

#: distribution names (PEP 503 normalised) each package installs; any other dependency is left out
SIDES: dict[str, frozenset[str]] = {
    "edge": frozenset({"pyroute2", "confluent-kafka", "numpy", "protobuf", "prometheus-client", "cryptography"}),
    "central": frozenset(
        {
            "confluent-kafka",
            "clickhouse-driver",
            "numpy",
            "protobuf",
            "pandas",
            "apscheduler",
            "prometheus-client",
            "chdb",
            "cryptography",
            "matplotlib",
            "scipy",
        }
    ),
}
#: top-level code of the dyncc wheel each package leaves out (the other side, and the lab that runs both)
DROP: dict[str, tuple[str, ...]] = {
    "edge": ("controller", "dyncc/lab"),
    "central": ("collector", "dyncc/lab"),
}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return normalise(match.group(1))


def requirements(side: str, pyproject: Path) -> list[str]:
    """The requirement strings of `side`; ValueError when a named distribution is not a dependency."""
    declared = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    chosen = [r for r in declared if requirement_name(r) in SIDES[side]]
    missing = SIDES[side] - {requirement_name(r) for r in chosen}
    if missing:
        raise ValueError(f"{side}: not in pyproject.toml's dependencies: {', '.join(sorted(missing))}")
    return chosen


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2) or argv[0] not in SIDES or (len(argv) == 2 and argv[1] != "drop"):
        print("usage: requirements.py edge|central [drop]", file=sys.stderr)
        return 2
    side = argv[0]
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    lines = DROP[side] if len(argv) == 2 else requirements(side, pyproject)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
