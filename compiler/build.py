"""Build header + shim into a shared library with the host C++ compiler, cached by content.

The flags live here and nowhere else. They give the same bits as a firmware build of the
same header: no FMA contraction (-ffp-contract=off), IEEE semantics (no -ffast-math), and
the header's own math functions, so neither vectorization nor -march=native can change
any result (tests/test_compiler_exact.py checks -O0 against these flags bit for bit).

The cache is safe to share between processes (pytest workers, a Dask cluster on one
machine): see ``compiler.cache`` for how entries are published, verified and repaired.
"""
from __future__ import annotations

import hashlib
import os
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


@lru_cache(maxsize=1)
def cpu_fingerprint() -> str:
    """-march=native code is only valid on this CPU: key the cache on its feature flags."""
    try:
        with open("/proc/cpuinfo") as handle:
            flags = next((line for line in handle if line.startswith(("flags", "Features"))), "")
    except OSError:
        flags = ""
    import platform
    return hashlib.sha256((platform.machine() + flags).encode()).hexdigest()[:16]


@lru_cache(maxsize=8)
def compiler_version(cxx: str) -> str:
    try:
        result = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    except OSError as exc:
        raise ToolchainError(f"cannot run {cxx}: {exc}; {INSTALL_HINT}") from exc
    return result.stdout.splitlines()[0] if result.stdout else cxx


def build_library(name: str, header: str, abi: str, extra_flags: tuple[str, ...] = ()) -> Path:
    """The shared library for this exact source, flags, compiler and CPU: from the cache when a
    verified entry exists, else compiled in a private folder and published into the cache."""
    cxx = find_compiler()
    flags = CXXFLAGS + tuple(extra_flags)
    key = hashlib.sha256("\0".join([name, header, abi, " ".join(flags), compiler_version(cxx),
                                    cpu_fingerprint()]).encode()).hexdigest()[:32]
    library = f"lib{name}.so"

    def compile_into(folder: Path) -> None:
        (folder / f"{name}.hpp").write_text(header)
        (folder / f"{name}_abi.cpp").write_text(abi)
        command = [cxx, *flags, str(folder / f"{name}_abi.cpp"), "-o", str(folder / library)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise ToolchainError(f"building {name} failed", command, result.stderr)

    return cache.get_or_build(key, library, compile_into) / library
