"""Compile the agent's BPF programs with clang, cached by content.

The programs are the sock_ops program (collector/agent/bpf/cc_switch.c, `--enforce bpf`) and the
TCP iterator that switches open connections (collector/agent/bpf/cc_iter.c, both modes).
`build_object(out_dir, program=...)` returns `out_dir/<program>-<hash>.o`, where the hash covers the source
text and the clang command, so an unchanged build is reused and a changed one never collides;
the object is written under a temporary name and renamed, so a reader never sees half a file.
`python -m collector.agent.bpf.build OUT_DIR` is the install step (`make bpf`): it builds both
and prints their paths, one a line (cc_switch first).  Needs Debian's clang (`-target bpf`, `-g`
for the BTF the maps and CO-RE need) and the kernel and libbpf headers (linux-libc-dev,
libbpf-dev); a missing one is a BpfBuildError naming what to install.  Nothing is fetched; an object of
the same name in this package's directory (the dyncc-edge Debian package compiles them there at
package time, debian/dyncc-venv) is used as it is, so an installed agent needs no compiler.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path

from collector.agent.bpf.iter_plan import ITER_PROGRAM
from collector.agent.bpf.plan import PROGRAM
from dyncc_common.errors import DynccError

CLANG = "clang"


class BpfBuildError(DynccError):
    """The sock_ops program could not be compiled (no clang, missing headers, compile error); one line."""


def source_text(program: str = PROGRAM) -> str:
    """The C source of `program` as shipped in the package."""
    try:
        return resources.files("collector.agent.bpf").joinpath(f"{program}.c").read_text()
    except (OSError, ValueError) as exc:
        raise BpfBuildError(f"no BPF source for {program}: {exc}") from exc


def clang_command(source: Path, output: Path, clang: str = CLANG) -> list[str]:
    """The clang command line (pure): -O2 -g -target bpf with the multiarch include dir."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu"
    return [
        clang,
        "-O2",
        "-g",
        "-target",
        "bpf",
        "-Wall",
        "-Werror",
        f"-idirafter/usr/include/{multiarch}",
        "-c",
        str(source),
        "-o",
        str(output),
    ]


def cached_name(program: str, text: str, probe: Sequence[str]) -> str:
    """`<program>-<hash>.o`, the hash over the source text and the compile command (pure)."""
    digest = hashlib.sha256("\0".join([text, *probe]).encode()).hexdigest()[:16]
    return f"{program}-{digest}.o"


def prebuilt(name: str) -> Path | None:
    """The object `name` shipped in this package's directory (the Debian package builds it there), if any."""
    try:
        shipped = Path(str(resources.files("collector.agent.bpf").joinpath(name)))
    except (OSError, ValueError, TypeError):
        return None
    return shipped if shipped.is_file() else None


def compile_cached(
    program: str,
    text: str,
    out_dir: Path,
    command: Callable[[Path, Path], list[str]],
    missing: str,
) -> Path:
    """Compile `text` (the C source of `program`) with `command(source, output)` into
    `out_dir/<program>-<hash>.o`, reusing an identical earlier build; BpfBuildError (one line,
    `missing` says what to install when the compiler is not found) on failure."""
    name = cached_name(program, text, command(Path("SRC"), Path("OUT")))
    shipped = prebuilt(name)
    if shipped is not None:
        return shipped
    target = out_dir / name
    if target.exists():
        return target
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BpfBuildError(f"cannot create {out_dir}: {exc.strerror}") from exc
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".bpf-") as tmp:
        src = Path(tmp) / f"{program}.c"
        src.write_text(text)
        obj = Path(tmp) / f"{program}.o"
        cmd = command(src, obj)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except FileNotFoundError as exc:
            raise BpfBuildError(f"{cmd[0]} not found: {missing}") from exc
        except subprocess.TimeoutExpired as exc:
            raise BpfBuildError(f"{cmd[0]} took more than 60 s on {program}.c") from exc
        if proc.returncode != 0:
            first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr.strip()[:200])
            hint = "; install libbpf-dev and linux-libc-dev" if "file not found" in first else ""
            raise BpfBuildError(f"{program}.c does not compile: {first.strip()}{hint}")
        os.replace(obj, target)
    return target


def build_object(out_dir: Path, clang: str = CLANG, program: str = PROGRAM) -> Path:
    """Compile `program` (cc_switch or cc_iter) into `out_dir` (reusing an identical earlier build)."""
    return compile_cached(
        program,
        source_text(program),
        out_dir,
        lambda src, obj: clang_command(src, obj, clang),
        "install clang and libbpf-dev (deploy/lab/lab.sh install)",
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m collector.agent.bpf.build OUT_DIR", file=sys.stderr)
        return 2
    try:
        for program in (PROGRAM, ITER_PROGRAM):
            print(build_object(Path(argv[0]), program=program))
    except BpfBuildError as exc:
        print(f"bpf_build: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
