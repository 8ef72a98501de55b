"""The dependency rule of docs/architecture.md, checked on the code as it is.

The rule is written once, as import-linter contracts in pyproject.toml `[tool.importlinter]`:
dyncc (the composition roots) above the two independent services collector (edge) and controller
(central), which share only schemas and dyncc_common.  import-linter builds its graph with grimp,
which reads every import statement of the five packages, including imports inside functions and
under `if TYPE_CHECKING:`, so a lazy import cannot hide an edge.  This file runs those contracts on
the repository, proves that each contract fails on a forbidden import planted in a copy of the
tree (the controller importing the collector, the collector importing dyncc, ...), and adds the
checks an import graph cannot express: the CLI's import-by-string table, lazy imports only where
start-up time needs them, no private name used across modules, `__all__` only as a tested API, no
module outside a sub-package, one exception tree (every exception class descends from
dyncc_common.errors.DynccError), every module that docs/architecture.md names exists, and every
query file is named after the controller package that owns it.
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
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dyncc", "dyncc_common", "schemas", "collector", "controller")
# Modules that import other modules of dyncc: the product, the tests, the benchmarks.
IMPORTERS = (*PACKAGES, "tests", "bench")
# Entry points: the only module allowed directly in dyncc/, collector/ or controller/ (the
# `dyncc` entry point).
ENTRY_POINTS = {"dyncc.cli"}
# The subcommand modules not named `cli`: a package's second command (`dyncc demo` in the lab,
# `dyncc access-log` in ingest).
SECOND_COMMANDS = {"dyncc.lab.demo", "controller.ingest.access_log_cli"}
# Where a function-level import of a dyncc module is allowed (docs/architecture.md, "Lazy
# imports"): the subcommand modules (`*.cli` and SECOND_COMMANDS: argparse first, the work
# behind it only when it runs), `dyncc collect`'s start path (`collect --once` start-up), and
# the store back ends, which load their driver only when a store of their kind is used: chDB
# (its cold import takes seconds) and the ClickHouse server's Native insert (store.native loads
# clickhouse-driver; measured: it would double every store user's import time).
LAZY_OK_PREFIXES = ("collector.telemetry.",)
LAZY_OK_MODULES = {"dyncc.cli", "controller.store.chdb", "controller.store.clickhouse", *SECOND_COMMANDS}

# Function-level imports outside those places, each to be removed, with its reason in a comment at
# the import (none left: ingest.settings no longer imports ingest.kafka).  Strict both ways: a new
# offender fails the test, and so does an entry that no longer offends (delete it, and its line in
# docs/architecture.md).  Entries are "path: what", without line numbers.
PENDING_LAZY: set[str] = set()
PENDING_PRIVATE: set[str] = set()


def check_against_pending(found: list[str], pending: set[str], what: str) -> None:
    """Fail on an offender (`path:line what`) not in `pending`, and on a `pending` entry that no
    longer offends."""
    keys = {re.sub(r"^([^:]+):\d+ ", r"\1: ", item) for item in found}
    new = sorted(item for item in found if re.sub(r"^([^:]+):\d+ ", r"\1: ", item) not in pending)
    stale = sorted(pending - keys)
    assert not new, f"{what}:\n" + "\n".join(new)
    assert not stale, f"fixed, so delete from the pending list of {what}:\n" + "\n".join(stale)


def lint_imports(tree: Path, contract: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the import-linter contracts of `tree`/pyproject.toml on the packages under `tree`
    (only the contract with id `contract` when given)."""
    tool = Path(sys.executable).with_name("lint-imports")
    if not tool.exists():
        pytest.fail(f"{tool} is missing: install the dev extras (pip install -e '.[dev]')")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    only = ["--contract", contract] if contract else []
    return subprocess.run(
        [str(tool), "--config", str(tree / "pyproject.toml"), "--no-cache", "--no-logo", *only],
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


def contract_ids() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {contract["id"] for contract in config["contracts"]}


# (contract id, module of the copy, the import planted at its end, the edge import-linter names).
# At module level, inside a function and under TYPE_CHECKING: grimp sees all three.
PLANTED = [
    # top: the composition roots above the services, the contract and the plumbing at the bottom
    ("top", "collector/agent/core.py", "import dyncc.cli\n", "collector.agent.core -> dyncc.cli"),
    (
        "top",
        "controller/control/loop.py",
        "def _planted() -> None:\n    import dyncc.lab.run\n",
        "controller.control.loop -> dyncc.lab.run",
    ),
    (
        "top",
        "schemas/signing.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import controller.store\n",
        "schemas.signing -> controller.store",
    ),
    ("top", "dyncc_common/files.py", "import schemas.addresses\n", "dyncc_common.files -> schemas.addresses"),
    # services-independent: the edge and the centre never import each other, either way
    (
        "services-independent",
        "controller/report/data.py",
        "import collector.telemetry.filters\n",
        "controller.report.data -> collector.telemetry.filters",
    ),
    (
        "services-independent",
        "collector/telemetry/poller.py",
        "def _planted() -> None:\n    import controller.store\n",
        "collector.telemetry.poller -> controller.store",
    ),
    # dyncc: the lab never reaches up into the entry point
    ("dyncc", "dyncc/lab/run.py", "import dyncc.cli\n", "dyncc.lab.run -> dyncc.cli"),
    # collector: the kernel ABI imports nothing above it
    (
        "collector",
        "collector/netlink/rtnetlink.py",
        "import collector.agent.plan\n",
        "collector.netlink.rtnetlink -> collector.agent.plan",
    ),
    # `dyncc collect` reaches into `dyncc agent`, from inside a function
    (
        "edge-commands-independent",
        "collector/telemetry/runner.py",
        "def _planted() -> None:\n    import collector.agent.core\n",
        "collector.telemetry.runner -> collector.agent.core",
    ),
    # an import circle inside an edge command: the settings (numpy-free) import the poller back
    (
        "collector-acyclic",
        "collector/telemetry/settings.py",
        "def _planted() -> None:\n    import collector.telemetry.poller\n",
        "collector.telemetry.\nIt could be made acyclic by removing 1 dependency:\n\n- .settings -> .poller",
    ),
    (
        "netlink-abi-only",
        "collector/netlink/abi.py",
        "import schemas.tcpinfo_columns\n",
        "collector.netlink.abi -> schemas.tcpinfo_columns",
    ),
    # controller: the store imports nothing above it
    (
        "controller",
        "controller/store/url.py",
        "import controller.evidence\n",
        "controller.store.url -> controller.evidence",
    ),
    # rollout reads more of scoring than the desired state
    (
        "rollout-desired-only",
        "controller/rollout/engine.py",
        "import controller.scoring.query\n",
        "controller.rollout.engine -> controller.scoring.query",
    ),
    (
        "control-scope",
        "controller/control/loop.py",
        "import controller.report.data\n",
        "controller.control.loop -> controller.report.data",
    ),
]


def test_every_contract_has_a_planted_violation() -> None:
    """Each contract of pyproject.toml is shown to fail below (and names no contract that is gone)."""
    assert {contract for contract, *_ in PLANTED} == contract_ids()


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the five packages' modules and pyproject.toml, made once; each case plants its
    import in one module and restores it afterwards."""
    tree = tmp_path_factory.mktemp("tree")
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__", "*.c", "*.proto", "*.pyi")
        )
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


@pytest.mark.parametrize(("contract", "module", "planted", "edge"), PLANTED)
def test_a_planted_forbidden_import_breaks_its_contract(
    tree_copy: Path, contract: str, module: str, planted: str, edge: str
) -> None:
    target = tree_copy / module
    original = target.read_text()
    target.write_text(original + "\n\n" + planted)
    try:
        result = lint_imports(tree_copy, contract)
    finally:
        target.write_text(original)

    assert result.returncode != 0, result.stdout + result.stderr
    assert "0 kept, 1 broken" in result.stdout, result.stdout + result.stderr
    # The planted edge exists only in the copy: naming it shows the copy was the tree checked.
    assert edge in result.stdout, result.stdout


def test_the_copy_keeps_every_contract(tree_copy: Path) -> None:
    """Without a planted import the copy passes: the failures above come from the plants."""
    result = lint_imports(tree_copy)
    assert result.returncode == 0, result.stdout + result.stderr


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


def _assigns_all(tree: ast.Module) -> bool:
    """Whether the module binds `__all__` at its top level (in any form)."""
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return True
    return False


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


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` of a chain of attributes on a name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    return ".".join([node.id, *parts]) if isinstance(node, ast.Name) else None


def imported_names(roots: tuple[str, ...]) -> set[tuple[str, str]]:
    """(module, name) of every `from module import name` under `roots`, and of every
    `module.name` reached through an `import module [as alias]`."""
    found: set[tuple[str, str]] = set()
    for importer, _, tree in _modules(roots):
        bound: dict[str, str] = {}  # local name -> the module (or top-level package) it is
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _absolute(importer, node)
                found.update((source, alias.name) for alias in node.names)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    local = alias.asname or alias.name.split(".")[0]
                    bound[local] = alias.name if alias.asname else local
        for node in ast.walk(tree):
            dotted = _dotted(node) if isinstance(node, ast.Attribute) else None
            if dotted is None or dotted.split(".")[0] not in bound:
                continue
            head, _, rest = dotted.partition(".")
            module, _, name = f"{bound[head]}.{rest}".rpartition(".")
            found.add((module, name))
    return found


def package_export_problems(packages: tuple[str, ...], tests: tuple[str, ...]) -> list[str]:
    """What is wrong with the `__all__` of the package `__init__`s under `packages`.

    A package declares `__all__` only for an API other code imports from the package itself
    (controller.store, controller.report): a literal list, each name defined in the `__init__`
    (or by its PEP 562 `__getattr__`, where the package must stay light to import), none a mere
    sub-module, and each imported by a test under `tests` (`from package import name` or
    `package.name`), as httpx tests its exports.  A package without such an API has no `__all__`.
    """
    problems = []
    tested = imported_names(tests)
    for module, path, tree in _modules(packages):
        if path.name != "__init__.py" or not _assigns_all(tree):
            continue
        where = path.relative_to(ROOT)
        exported = _declared_all(tree)
        if exported is None:
            problems.append(f"{where}: __all__ is not a literal list of names")
            continue
        bound = _bound_names(tree)
        lazy = "__getattr__" in bound
        for name in exported:
            if name not in bound and _is_module(f"{module}.{name}"):
                problems.append(f"{where}: __all__ names the sub-module {name!r} (list an API, or drop __all__)")
            elif name not in bound and not lazy:
                problems.append(f"{where}: __all__ names {name!r}, which it does not define")
            elif (module, name) not in tested:
                problems.append(f"{where}: __all__ names {name!r}, which no test imports from {module}")
    return problems


def test_every_package_all_is_a_tested_api() -> None:
    problems = package_export_problems(PACKAGES, ("tests",))
    assert not problems, "\n".join(problems)


def test_the_export_check_finds_bad_exports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a name not defined, a sub-module, an export no test imports and a
    computed `__all__` are reported; a package without `__all__`, and exports a test imports
    (by name, or as an attribute of the imported package), are not."""
    files = {
        "pkg/__init__.py": "from pkg.impl import other, thing, used\n"
        "__all__ = ['thing', 'used', 'other', 'missing', 'sub']\n",
        "pkg/impl.py": "def thing() -> None: ...\ndef other() -> None: ...\ndef used() -> None: ...\n",
        "pkg/sub.py": "",
        "pkg/computed/__init__.py": "__all__ = sorted(['a'])\na = 1\n",
        "pkg/plain/__init__.py": '"""No API: no __all__."""\n',
        "tests/__init__.py": "",
        "tests/test_pkg.py": "import pkg as p\nfrom pkg import thing\n\ndef test() -> None:\n    p.used()\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert package_export_problems(("pkg",), ("tests",)) == [
        "pkg/__init__.py: __all__ names 'other', which no test imports from pkg",
        "pkg/__init__.py: __all__ names 'missing', which it does not define",
        "pkg/__init__.py: __all__ names the sub-module 'sub' (list an API, or drop __all__)",
        "pkg/computed/__init__.py: __all__ is not a literal list of names",
    ]


def test_no_module_sits_outside_a_sub_package() -> None:
    loose = [
        module
        for module, path, _ in _modules(("dyncc", "collector", "controller"))
        if module.count(".") == 1 and path.name != "__init__.py" and module not in ENTRY_POINTS
    ]
    assert not loose, f"modules directly in dyncc/, collector/ or controller/ (move them into a sub-package): {loose}"


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


# ---- sql/queries: each file is named after the controller package that owns it ---------------

# docs/architecture.md ("Which module handles…", a query's SQL) lists these prefixes.
QUERY_PREFIXES = ("store_", "ingest_", "evidence_", "scoring_", "rollout_", "report_")


def test_every_query_file_is_named_after_its_package() -> None:
    names = sorted(path.name for path in (ROOT / "sql" / "queries").glob("*.sql"))
    assert names, "sql/queries holds no query"
    stray = [name for name in names if not name.startswith(QUERY_PREFIXES)]
    assert not stray, f"sql/queries files without a package prefix {QUERY_PREFIXES}: {stray}"
    for prefix in QUERY_PREFIXES:
        assert (ROOT / "controller" / prefix.rstrip("_")).is_dir(), f"{prefix}: no such controller package"


def test_docs_architecture_lists_the_query_prefixes() -> None:
    row = next(line for line in ARCHITECTURE.read_text().splitlines() if line.startswith("| a query's SQL |"))
    assert set(re.findall(r"`([a-z]+_)`", row)) == set(QUERY_PREFIXES), row
