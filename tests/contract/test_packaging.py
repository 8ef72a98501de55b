"""What an installed dyncc carries: every package, and sql/ as package data found by the SQL loader.

The repository keeps `sql/` at the top level; the wheel ships it as controller.store.sqldata
(pyproject's package-dir), and controller.store.sql finds it there with importlib.resources.
The wheel is built from a copy of the sources (so the checkout is left as it is), unpacked,
and imported in a subprocess whose path puts the unpacked wheel first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE_ROOTS = ("dyncc", "dyncc_common", "collector", "controller", "schemas")
SQL_PACKAGE = "controller.store.sqldata"


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _package_folders() -> set[str]:
    found = set()
    for root in PACKAGE_ROOTS:
        for init in (REPO / root).rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                found.add(".".join(init.parent.relative_to(REPO).parts))
    return found


def test_package_list_names_every_package_folder() -> None:
    packages = set(_pyproject()["tool"]["setuptools"]["packages"])
    assert packages - {SQL_PACKAGE} == _package_folders()
    assert _pyproject()["tool"]["setuptools"]["package-dir"][SQL_PACKAGE] == "sql"


def _sql_files() -> set[str]:
    return {p.relative_to(REPO / "sql").as_posix() for p in (REPO / "sql").rglob("*.sql")}


def test_wheel_ships_sql_and_the_loader_finds_it(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in (*PACKAGE_ROOTS, "sql"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    out = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = out.glob("dyncc-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        zf.extractall(tmp_path / "site")
    prefix = SQL_PACKAGE.replace(".", "/") + "/"
    shipped = {n.removeprefix(prefix) for n in names if n.startswith(prefix)}
    assert shipped == _sql_files()
    for package in _package_folders():
        assert package.replace(".", "/") + "/__init__.py" in names

    code = (
        "import controller, controller.store.sql as s\n"
        "print(controller.__file__)\n"
        "print(s.sql_dir())\n"
        "print(len(s.migrations()), len(s.query('store_known_pops')) > 0)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DYNCC_SQL_DIR"}
    env["PYTHONPATH"] = str(tmp_path / "site")
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    module_file, sql_dir, counts = run.stdout.splitlines()
    site = (tmp_path / "site").resolve()
    assert Path(module_file).resolve().is_relative_to(site)
    assert Path(sql_dir).resolve() == site / "controller" / "store" / "sqldata"
    migrations = len([f for f in _sql_files() if f.startswith("migrations/")])
    assert counts == f"{migrations} True"


def test_dev_tree_uses_the_repository_sql_and_the_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from controller.store.sql import sql_dir

    monkeypatch.delenv("DYNCC_SQL_DIR", raising=False)
    assert sql_dir() == REPO / "sql"
    (tmp_path / "migrations").mkdir()
    monkeypatch.setenv("DYNCC_SQL_DIR", str(tmp_path))
    assert sql_dir() == tmp_path
