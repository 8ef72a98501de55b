"""The dependency rule of docs/architecture.md, checked on the code as it is.

The rule is written once, as import-linter contracts in pyproject.toml `[tool.importlinter]`.
import-linter builds its graph with grimp, which reads every import statement of the four packages,
including imports inside functions and under `if TYPE_CHECKING:`, so a lazy import cannot hide an
edge.  This file runs those contracts on the repository, proves that they fail on a forbidden import
planted in a copy of the tree, and adds the checks an import graph cannot express: the CLI's
import-by-string table, lazy imports only where start-up time needs them, no private name used
across modules, `__all__` in every package, no module outside a sub-package, one exception tree
(every exception class descends from dyncc_common.errors.DynccError), and every module that
docs/architecture.md names exists.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dyncc", "dyncc_common", "schemas", "collector", "controller")
# Modules that import other modules of dyncc: the product, the tests, the benchmarks.
IMPORTERS = (*PACKAGES, "tests", "bench")
# Entry points: the only modules allowed directly in a top-level package (the `dyncc`
# entry point and its `--config FILE.toml` helper).
ENTRY_POINTS = {"dyncc.cli"}
# The subcommand modules not named `cli`: a package's second command (`dyncc demo` in the lab,
# `dyncc access-log` in ingest).
SECOND_COMMANDS = {"dyncc.lab.demo", "controller.ingest.access_log_cli"}
# Where a function-level import of a dyncc module is allowed (docs/architecture.md, "Lazy
# imports"): the subcommand modules (`*.cli` and SECOND_COMMANDS: argparse first, the work
# behind it only when it runs), `dyncc collect`'s start path (`collect --once` start-up), and
# the chDB back end (chDB's cold import takes seconds).
LAZY_OK_PREFIXES = ("collector.telemetry.",)
LAZY_OK_MODULES = {"dyncc.cli", "controller.store.chdb", *SECOND_COMMANDS}

# The remaining function-level imports, each with its reason in a comment at the import:
# store.native loads clickhouse-driver (measured: it would double every store user's import time
# though only a ClickHouse insert needs it); ingest.settings -> ingest.kafka would be a cycle.
# Strict both ways: a new offender fails the test, and so does an entry that no longer offends
# (delete it).  Entries are "path: what", without line numbers.
PENDING_LAZY = {
    "controller/ingest/settings.py: kafka_config() imports controller.ingest.kafka",
    "controller/store/clickhouse.py: prepare_block() imports controller.store.native",
    "controller/store/clickhouse.py: bulk_insert() imports controller.store.native",
    "controller/store/clickhouse.py: _native_insert() imports controller.store.native",
    "controller/store/clickhouse.py: _checkout() imports controller.store.native",
}
PENDING_PRIVATE: set[str] = set()


def check_against_pending(found: list[str], pending: set[str], what: str) -> None:
    """Fail on an offender (`path:line what`) not in `pending`, and on a `pending` entry that no
    longer offends."""
    keys = {re.sub(r"^([^:]+):\d+ ", r"\1: ", item) for item in found}
    new = sorted(item for item in found if re.sub(r"^([^:]+):\d+ ", r"\1: ", item) not in pending)
    stale = sorted(pending - keys)
    assert not new, f"{what}:\n" + "\n".join(new)
    assert not stale, f"fixed, so delete from the pending list of {what}:\n" + "\n".join(stale)


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """Run the repository's import-linter contracts on the packages under `tree`."""
    tool = Path(sys.executable).with_name("lint-imports")
    if not tool.exists():
        pytest.fail(f"{tool} is missing: install the dev extras (pip install -e '.[dev]')")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(tool), "--config", str(tree / "pyproject.toml"), "--no-cache", "--no-logo"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_import_contracts_hold() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout, result.stdout


@pytest.mark.parametrize(
    ("module", "planted", "edge"),
    [
        # the edge imports the centre (module level)
        (
            "collector/telemetry/poller.py",
            "import controller.store\n",
            "collector.telemetry.poller -> controller.store",
        ),
        # `dyncc collect` reaches into `dyncc agent`, from inside a function
        (
            "collector/telemetry/runner.py",
            "def _planted() -> None:\n    import collector.agent.core\n",
            "collector.telemetry.runner -> collector.agent.core",
        ),
        # the contract imports the store, under TYPE_CHECKING
        (
            "schemas/signing.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import controller.store\n",
            "schemas.signing -> controller.store",
        ),
        # a central package other than cli and lab imports the edge
        (
            "controller/report/data.py",
            "import collector.telemetry.filters\n",
            "controller.report.data -> collector.telemetry.filters",
        ),
        # rollout reads more of scoring than the desired state
        (
            "controller/rollout/engine.py",
            "import controller.scoring.query\n",
            "controller.rollout.engine -> controller.scoring.query",
        ),
    ],
)
def test_a_planted_forbidden_import_fails_the_contracts(tmp_path: Path, module: str, planted: str, edge: str) -> None:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(target.read_text() + "\n\n" + planted)

    result = lint_imports(tmp_path)

    assert result.returncode != 0, result.stdout
    # The planted edge exists only in the copy: naming it shows the copy was the tree checked.
    assert edge in result.stdout, result.stdout


# ---- checks an import graph cannot express ---------------------------------------------------


def _modules(roots: tuple[str, ...]) -> Iterator[tuple[str, Path, ast.Module]]:
    """(dotted name, path, AST) of every Python module under `roots`, generated code excluded."""
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            if path.name.endswith("_pb2.py") or "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join(parts), path, ast.parse(path.read_text(), str(path))


def _is_package(module: str) -> bool:
    return (ROOT / module.replace(".", "/") / "__init__.py").exists()


def _is_module(module: str) -> bool:
    path = ROOT / module.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _absolute(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if _is_package(importer) else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _parent(module: str) -> str:
    return module.rpartition(".")[0]


def test_no_private_name_is_used_across_modules() -> None:
    """`from m import _x`, `import m._x` and `m._x` on an imported dyncc module are all refused.

    A private module (`_x.py`) may still be imported by its own package's modules (the httpx
    layout).  Tests patch private names by string (`monkeypatch.setattr(m, "_x", ...)`), which
    this check leaves alone.
    """
    found = []
    for importer, path, tree in _modules(IMPORTERS):
        aliases: dict[str, str] = {}  # local name -> dyncc module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] not in IMPORTERS:
                        continue
                    hidden = [p for p in alias.name.split(".") if _private(p)]
                    if hidden and _parent(alias.name) != _parent(importer):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} import {alias.name}")
                    if alias.asname:
                        aliases[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(importer, node)
                if source.split(".")[0] not in IMPORTERS:
                    continue
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    if _is_module(full):
                        if _private(alias.name) and source != _parent(importer):
                            found.append(f"{path.relative_to(ROOT)}:{node.lineno} from {source} import {alias.name}")
                        aliases[alias.asname or alias.name] = full
                    elif _private(alias.name):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} from {source} import {alias.name}")
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and _private(node.attr)
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {aliases[node.value.id]}.{node.attr}")
    check_against_pending(found, PENDING_PRIVATE, "private names used across modules")


def _bound_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _declared_all(tree: ast.Module) -> list[str] | None:
    """The names of a module-level `__all__` written as a literal list or tuple of strings."""
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if not any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            continue
        if not isinstance(value, (ast.List, ast.Tuple)):
            return None
        names = [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return names if len(names) == len(value.elts) else None
    return None


def test_every_package_declares_its_public_names() -> None:
    """Each package `__init__` has a literal `__all__`, and each name in it exists there.

    A name may also be a submodule, or be provided by a PEP 562 `__getattr__` (used where the
    package must stay light to import).
    """
    problems = []
    for module, path, tree in _modules(PACKAGES):
        if path.name != "__init__.py":
            continue
        exported = _declared_all(tree)
        if exported is None:
            problems.append(f"{path.relative_to(ROOT)}: no literal __all__")
            continue
        bound = _bound_names(tree)
        lazy = "__getattr__" in bound
        for name in exported:
            if name not in bound and not _is_module(f"{module}.{name}") and not lazy:
                problems.append(f"{path.relative_to(ROOT)}: __all__ names {name!r}, which it does not define")
    assert not problems, "\n".join(problems)


def test_no_module_sits_outside_a_sub_package() -> None:
    loose = [
        module
        for module, path, _ in _modules(("collector", "controller"))
        if module.count(".") == 1 and path.name != "__init__.py" and module not in ENTRY_POINTS
    ]
    assert not loose, f"modules directly in collector/ or controller/ (move them into a sub-package): {loose}"


def test_the_cli_loads_only_subcommand_modules() -> None:
    """dyncc.cli imports its subcommands by name (importlib), which no import graph sees."""
    cli = importlib.import_module("dyncc.cli")
    targets = [module for module, _ in cli.SUBCOMMANDS.values()]
    assert targets, "dyncc.cli.SUBCOMMANDS is empty"
    for target in targets:
        assert target.endswith(".cli") or target in SECOND_COMMANDS, target
        assert importlib.util.find_spec(target) is not None, f"{target} does not exist"


def test_lazy_imports_of_dyncc_modules_only_where_start_up_needs_them() -> None:
    """A dyncc module imported inside a function hides a dependency; allowed only in the places
    docs/architecture.md lists (subcommand modules, `dyncc collect`'s start path, the store back
    ends) and in a package `__init__`'s PEP 562 `__getattr__`.  Third-party lazy imports are not
    checked here (docs/architecture.md lists them)."""
    found = []
    for module, path, tree in _modules(PACKAGES):
        allowed = module in LAZY_OK_MODULES or module.endswith(".cli") or module.startswith(LAZY_OK_PREFIXES)
        if allowed:
            continue
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if function.name == "__getattr__" and path.name == "__init__.py":
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = [_absolute(module, node)]
                else:
                    continue
                for name in names:
                    if name.split(".")[0] in PACKAGES:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} {function.name}() imports {name}")
    check_against_pending(found, PENDING_LAZY, "function-level imports of dyncc modules outside the allowed places")


# ---- one exception tree ----------------------------------------------------------------------

BASE_ERROR = "DynccError"


def _base_names(node: ast.ClassDef) -> list[str]:
    """The bases of a class as written: `X` or the last part of `m.X`."""
    names = []
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.append(base.id)
        elif isinstance(base, ast.Attribute):
            names.append(base.attr)
    return names


def _is_builtin_exception(name: str) -> bool:
    value = getattr(builtins, name, None)
    return isinstance(value, type) and issubclass(value, BaseException)


def exception_tree_problems(roots: tuple[str, ...] = PACKAGES) -> list[str]:
    """Every exception class defined under `roots` that does not descend from DynccError.

    Classes are resolved by name across the product (dyncc's class names are unique enough for
    this: a clash would show as a wrong answer here, and the tree in dyncc_common/errors.py).
    """
    classes: dict[str, tuple[list[str], str]] = {}
    for _, path, tree in _modules(roots):
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = (_base_names(node), f"{path.relative_to(ROOT)}:{node.lineno}")

    def reaches(name: str, target: str, seen: frozenset[str] = frozenset()) -> bool:
        if name == target:
            return True
        if name in seen or name not in classes:
            return False
        return any(reaches(base, target, seen | {name}) for base in classes[name][0])

    def is_exception(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if _is_builtin_exception(name):
            return True
        if name in seen or name not in classes:
            return False
        return any(is_exception(base, seen | {name}) for base in classes[name][0])

    return [
        f"{where} class {name}({', '.join(bases)})"
        for name, (bases, where) in sorted(classes.items())
        if name != BASE_ERROR and is_exception(name) and not reaches(name, BASE_ERROR)
    ]


def test_every_exception_class_descends_from_dyncc_error() -> None:
    problems = exception_tree_problems()
    assert not problems, "exception classes outside the tree of dyncc_common.errors.DynccError:\n" + "\n".join(problems)


def test_the_exception_check_finds_a_stray_exception(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a class deriving from a builtin exception, directly or through a
    local class, is reported; one deriving from DynccError (also with ValueError) is not."""
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "errors.py").write_text(
        "class DynccError(Exception):\n    pass\n"
        "class Fine(DynccError, ValueError):\n    pass\n"
        "class Stray(ValueError):\n    pass\n"
        "class StrayChild(Stray):\n    pass\n"
        "class NotAnError:\n    pass\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = exception_tree_problems(("planted",))
    assert [line.split(" class ")[1] for line in found] == ["Stray(ValueError)", "StrayChild(Stray)"]


# ---- docs/architecture.md names modules that exist -------------------------------------------

ARCHITECTURE = ROOT / "docs" / "architecture.md"
# `collector/netlink/abi.py`, `dyncc/cli.py`, `sql/migrations/001_tcpinfo.sql`, ... (a path
# with a folder), or a bare `name.py` listed under a package's heading.
PATH_MENTION = re.compile(r"`((?:[a-z_][a-z0-9_]*/)+[a-z0-9_]+\.(?:py|proto|sql|md|toml))`")
BARE_MENTION = re.compile(r"`([a-z_][a-z0-9_]*\.py)`")
PACKAGE_HEADING = re.compile(r"\*\*`((?:[a-z_]+/)+)`")


def architecture_missing_paths(text: str, root: Path) -> list[str]:
    """Paths `docs/architecture.md` names that do not exist under `root`.

    A bare `x.py` is looked up in the package whose heading (`**`pkg/`**`) precedes it, or, in a
    table row, in the folder of the last full path named earlier in the same row or cell.
    """
    missing = []
    package = ""
    for line in text.splitlines():
        heading = PACKAGE_HEADING.search(line)
        if heading:
            package = heading.group(1)
        for mention in PATH_MENTION.findall(line):
            if "*" not in mention and not (root / mention).exists() and not (root / "docs" / mention).exists():
                missing.append(mention)
        for match in BARE_MENTION.finditer(line):
            if line[max(0, match.start() - 1) : match.start()] == "/":
                continue
            # the folder: the last full path earlier on the line, else the current package heading
            earlier = PATH_MENTION.findall(line[: match.start()])
            folder = earlier[-1].rsplit("/", 1)[0] + "/" if earlier else package
            if folder and not (root / folder / match.group(1)).exists():
                missing.append(folder + match.group(1))
    return sorted(set(missing))


def test_every_module_docs_architecture_names_exists() -> None:
    text = ARCHITECTURE.read_text()
    assert PATH_MENTION.search(text), "docs/architecture.md names no module"
    missing = architecture_missing_paths(text, ROOT)
    assert not missing, "docs/architecture.md names paths that do not exist:\n" + "\n".join(missing)


def test_the_docs_check_finds_a_missing_module() -> None:
    text = (
        "**`collector/netlink/`: the kernel ABI.**\n"
        "* `abi.py` and `no_such_decoder.py`.\n"
        "| hop | `controller/ingest/kafka.py`, `nowhere.py` |\n"
        "see `schemas/tcpinfo.proto` and `controller/nothing_here.py`\n"
    )
    assert architecture_missing_paths(text, ROOT) == [
        "collector/netlink/no_such_decoder.py",
        "controller/ingest/nowhere.py",
        "controller/nothing_here.py",
    ]


def test_the_pending_lists_are_strict() -> None:
    """A new offender fails, and so does a pending entry that no longer offends."""
    pending = {"a/b.py: f() imports c.d"}
    check_against_pending(["a/b.py:3 f() imports c.d"], pending, "x")
    with pytest.raises(AssertionError, match=re.escape("a/b.py:4 g")):
        check_against_pending(["a/b.py:3 f() imports c.d", "a/b.py:4 g() imports c.e"], pending, "x")
    with pytest.raises(AssertionError, match="delete"):
        check_against_pending([], pending, "x")
