"""Build header + shim into a shared library with the host C++ compiler, cached by content.

The flags live here and nowhere else. They give the same bits as a firmware build of the
same header: no FMA contraction (-ffp-contract=off), IEEE semantics (no -ffast-math), and
the header's own math functions, so neither vectorization nor -march=native can change
any result (tests/test_compiler_exact.py checks -O0 against these flags bit for bit).

The cache is safe to share between processes (pytest workers, a Dask cluster): see
``compiler.cache`` for how entries are published, verified and repaired. The key holds the
sources and ``toolchain_identity``: the compiler, its version, the flags and what they
resolve to on this CPU (-march=native included), so machines with different CPUs sharing one
cache folder each get their own entry. The compiled engine (cbfsim/engine.py) keys its
builds with the same function.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from . import cache
from .errors import ToolchainError

CXXFLAGS = ("-std=c++17", "-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-fPIC", "-shared")
INSTALL_HINT = "install a C++17 compiler, e.g. `apt-get install -y g++`, or point CXX at one"


@lru_cache(maxsize=None)
def has_avx512() -> bool:
    """Whether this CPU has AVX-512 (read once from /proc/cpuinfo)."""
    try:
        return " avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def valgrind_compatible(flags: tuple[str, ...]) -> tuple[str, ...]:
    """Flags for a build that callgrind can count: valgrind 3.19 (Debian 12) cannot decode
    AVX-512, so on such CPUs -march=native gets -mno-avx512f (AVX2 code, same results)."""
    return flags + ("-mno-avx512f",) if "-march=native" in flags and has_avx512() else flags


def find_compiler() -> str:
    cxx = os.environ.get("CXX", "g++")
    path = shutil.which(cxx)
    if not path:
        raise ToolchainError(f"no C++ compiler found (looked for {cxx!r}); {INSTALL_HINT}")
    return path


@lru_cache(maxsize=8)
def compiler_version(cxx: str) -> str:
    """The first line of ``cxx --version`` (for reports)."""
    return compiler_banner(cxx).splitlines()[0] if compiler_banner(cxx) else cxx


@lru_cache(maxsize=8)
def compiler_banner(cxx: str) -> str:
    """The whole output of ``cxx --version``."""
    try:
        result = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"cannot run {cxx}: {exc}; {INSTALL_HINT}") from exc
    return result.stdout


@lru_cache(maxsize=32)
def resolved_target(cxx: str, flags: tuple[str, ...]) -> str:
    """What the driver passes to the compiler proper for these flags (``cxx FLAGS -### -E``):
    -march=native resolved to this CPU's architecture, every -m feature switch and the cache
    parameters, the target triple and the configuration. Two CPUs that differ in any of them
    get different cache keys. Deterministic: nothing is compiled, no temporary name appears."""
    command = [cxx, *flags, "-###", "-E", "-x", "c++", os.devnull]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"cannot run {cxx}: {exc}; {INSTALL_HINT}") from exc
    if result.returncode != 0:
        raise ToolchainError(f"{cxx} refused the build flags", command, result.stderr)
    return result.stderr + result.stdout


def native_arch(cxx: str, flags: tuple[str, ...]) -> str:
    """The architecture -march=native (or the default) resolves to, e.g. 'cooperlake' ('' if unknown)."""
    found = [a for a in re.findall(r'-march=([\w.+-]+)', resolved_target(cxx, flags)) if a != "native"]
    return found[-1] if found else ""


def toolchain_identity(cxx: str, flags: tuple[str, ...]) -> str:
    """Everything besides the sources that decides the machine code of a build: the compiler's
    resolved path, its ``--version``, the flags in order, and what they resolve to on this CPU
    (``resolved_target``). Part of every cache key (barriers and engines)."""
    path = os.path.realpath(cxx)
    return "\0".join([path, compiler_banner(cxx), " ".join(flags), resolved_target(cxx, flags)])


def build_library(name: str, header: str, abi: str, extra_flags: tuple[str, ...] = ()) -> Path:
    """The shared library for this exact source, flags, compiler and CPU: from the cache when a
    verified entry exists, else compiled in a private folder and published into the cache."""
    cxx = find_compiler()
    flags = CXXFLAGS + tuple(extra_flags)
    key = hashlib.sha256("\0".join([name, header, abi, toolchain_identity(cxx, flags)]).encode()).hexdigest()[:32]
    library = f"lib{name}.so"

    def compile_into(folder: Path) -> None:
        (folder / f"{name}.hpp").write_text(header)
        (folder / f"{name}_abi.cpp").write_text(abi)
        command = [cxx, *flags, str(folder / f"{name}_abi.cpp"), "-o", str(folder / library)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise ToolchainError(f"building {name} failed", command, result.stderr)

    return cache.get_or_build(key, library, compile_into) / library
