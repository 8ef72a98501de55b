"""dyncc_common/errors.py's docstring draws the whole exception tree: every class it names exists
under the parent it is drawn under, and every public exception class of dyncc is drawn."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import dyncc_common.errors

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dyncc", "dyncc_common", "schemas", "collector", "controller")
BRANCH = re.compile(r"^\s*((?:[│ ]   )*)[├└]── (\w+)(?: \(\+(\w+)\))?")


def drawn(doc: str) -> dict[str, tuple[str, str | None]]:
    """class -> (the parent it is drawn under, its second base if drawn) from a tree docstring."""
    out: dict[str, tuple[str, str | None]] = {}
    stack = ["DynccError"]
    for line in doc.splitlines():
        m = BRANCH.match(line)
        if not m:
            continue
        depth = len(m.group(1)) // 4 + 1
        stack = [*stack[:depth], m.group(2)]
        out[m.group(2)] = (stack[depth - 1], m.group(3))
    return out


def defined() -> dict[str, list[str]]:
    """class -> its base names, for every class defined in the five packages (generated code aside)."""
    out: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path.name.endswith("_pb2.py"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    names = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                    out.setdefault(node.name, names)
    return out


def errors_of(classes: dict[str, list[str]]) -> set[str]:
    """The public classes that descend from DynccError (by name)."""
    found = {"DynccError"}
    grew = True
    while grew:
        new = {name for name, bases in classes.items() if name not in found and found & set(bases)}
        found |= new
        grew = bool(new)
    return {name for name in found - {"DynccError"} if not name.startswith("_")}


def problems(doc: str, classes: dict[str, list[str]]) -> list[str]:
    tree = drawn(doc)
    out = [f"{name}: drawn, but no such class" for name in sorted(set(tree) - set(classes))]
    for name, (parent, second) in sorted(tree.items()):
        bases = classes.get(name)
        if bases is not None and parent not in bases:
            out.append(f"{name}: drawn under {parent}, its bases are {bases}")
        if bases is not None and second is not None and second not in bases:
            out.append(f"{name}: drawn with +{second}, its bases are {bases}")
    out += [f"{name}: not drawn" for name in sorted(errors_of(classes) - set(tree))]
    return out


def test_the_docstring_draws_the_exception_tree() -> None:
    assert problems(dyncc_common.errors.__doc__ or "", defined()) == []


def test_a_missing_or_misplaced_class_is_reported() -> None:
    """The check can fail: a class drawn that does not exist, one drawn under the wrong parent,
    one not drawn."""
    classes = defined()
    classes.pop("SettingsUnreadable")
    classes["DumpTimeout"] = ["StoreError"]
    classes["NewError"] = ["ConfigError"]
    assert problems(dyncc_common.errors.__doc__ or "", classes) == [
        "SettingsUnreadable: drawn, but no such class",
        "DumpTimeout: drawn under DumpError, its bases are ['StoreError']",
        "NewError: not drawn",
    ]
