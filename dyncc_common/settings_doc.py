"""`python -m dyncc_common.settings_doc > docs/settings.md`: the settings reference, generated.

Renders every component of dyncc_common.settings.REGISTRY (or the `module:Class` paths
given as arguments) with `Settings.markdown()`, under a header saying the file is
generated.  The component modules are imported here, lazily, one by one.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Sequence

from dyncc_common.settings import REGISTRY, Settings

HEADER = """# dyncc settings

<!-- Generated from the settings tables — do not edit; run
     `python -m dyncc_common.settings_doc > docs/settings.md` instead. -->

Generated from the settings tables — do not edit.  Every setting of a command is a
command-line flag and, unless its TOML key is "—", a key of the file given with
`--config FILE.toml`: in a table named after the command (`[collect]`, `[control]`, ...)
or at the top level.  Keys may be written with `_` or `-`.  Precedence:
defaults < the TOML file < flags.  A list setting given as flags replaces the file's list,
except a list whose type says "flags add to the file's" (the deny list): its flags add to the
file's list, so an urgent `--deny RANGE` keeps every range of the file.  Durations are
written like `250ms`, `10s`, `5m`, `1h`, `7d`; sizes like `4096`, `512KiB`, `64MiB`, `1.5G`.
"""


def load(path: str) -> type[Settings]:
    """'package.module:Class' -> the settings class (ImportError / AttributeError as raised)."""
    module_name, _, attr = path.partition(":")
    if not attr:
        raise ValueError(f"{path!r}: use module:Class")
    cls = getattr(importlib.import_module(module_name), attr)
    if not (isinstance(cls, type) and issubclass(cls, Settings)):
        raise TypeError(f"{path} is not a Settings class")
    return cls


def render(paths: Iterable[str] | None = None) -> str:
    """The whole document: the header, then each component's section in registry order."""
    chosen = REGISTRY.values() if paths is None else paths
    sections = [load(path).markdown().rstrip("\n") for path in chosen]
    return HEADER + "\n" + "\n\n".join(sections) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(__doc__.strip() if __doc__ else "")
        return 0
    sys.stdout.write(render(args or None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
