"""Compile the lab's tc BPF programs (dyncc/lab/bpf/*.c) with clang, cached by content.

`build_random_drop(loss, out_dir)` returns the object file of bpf/random_drop.c built for
that loss fraction (its DROP_THRESHOLD define, loss * 2^32).  Objects are named
`<program>-<hash>.o` in `out_dir`, where the hash covers the source text, the defines and the
clang command, so an unchanged build is reused and a changed one never collides; each object
is written under a temporary name and renamed, so a reader never sees half a file.

Needs Debian's clang (`-target bpf`) and the kernel and libbpf headers (linux-libc-dev,
libbpf-dev).  A missing compiler or header is a BpfBuildError naming what to install.
"""

from __future__ import annotations

import platform
import sysconfig
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from collector.agent.bpf.build import BpfBuildError, compile_cached

CLANG = "clang"
RANDOM_DROP = "random_drop"
MAX_LOSS = 0.5


def source_text(program: str) -> str:
    """The C source of `program` as shipped in the package (dyncc/lab/bpf/<program>.c)."""
    try:
        return resources.files("dyncc.lab").joinpath("bpf", f"{program}.c").read_text()
    except (OSError, ValueError) as exc:
        raise BpfBuildError(f"no BPF source for {program!r}: {exc}") from exc


def drop_threshold(loss: float) -> int:
    """The u32 that a random u32 must be below to drop: round(loss * 2^32)."""
    if not 0.0 <= loss <= MAX_LOSS:
        raise BpfBuildError(f"loss fraction {loss} outside 0..{MAX_LOSS}")
    return min(round(loss * 2**32), 2**32 - 1)


def clang_command(source: Path, output: Path, defines: Mapping[str, str], clang: str = CLANG) -> list[str]:
    """The clang command line (pure): -O2 -target bpf, the multiarch include dir, sorted -D defines."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu"
    cmd = [clang, "-O2", "-target", "bpf", "-Wall", "-Werror", f"-idirafter/usr/include/{multiarch}"]
    cmd += [f"-D{k}={v}" for k, v in sorted(defines.items())]
    return [*cmd, "-c", str(source), "-o", str(output)]


def build(program: str, defines: Mapping[str, str], out_dir: Path, clang: str = CLANG) -> Path:
    """Compile bpf/<program>.c with `defines` into `out_dir` (reusing an identical earlier build)."""
    return compile_cached(
        program,
        source_text(program),
        out_dir,
        lambda src, obj: clang_command(src, obj, defines, clang),
        "install clang (and libbpf-dev) to build lab BPF programs",
    )


def build_random_drop(loss: float, out_dir: Path, clang: str = CLANG) -> Path:
    """The random-drop object for `loss` (a fraction, 0..0.5) in `out_dir`."""
    return build(RANDOM_DROP, {"DROP_THRESHOLD": f"{drop_threshold(loss)}U"}, out_dir, clang)
