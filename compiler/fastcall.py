"""Build and load ``fastcall.cpp``: the binding's single-state call as one CPython extension call.

Why: a ctypes call from Python spends more on converting arguments and building results than
the bicycle barrier spends computing (issue 24: the binding was 2.1-2.6x a raw ctypes call
of the float32 entry). The extension checks the arrays with numpy's macros and passes their
memory to the library's float64 entry, the same C function the ctypes path calls, so the
results are the same bits.

The extension is built once per Python, numpy and toolchain, with the host compiler, into
the build cache (``compiler.cache``, entries under ``extensions/``), the first time a
single-state call needs it. Without Python's or numpy's C headers, or with
``CBFSIM_FASTCALL=0`` in the environment, ``entry_type`` returns None and the binding keeps
its ctypes path (same checks, same results, slower); ``unavailable_reason`` says why.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path
from types import ModuleType

import numpy as np

from . import cache
from .build import find_compiler, toolchain_identity
from .errors import ToolchainError

SOURCE = Path(__file__).with_name("fastcall.cpp")
MODULE = "_cbf_fastcall"           # PyInit__cbf_fastcall in fastcall.cpp
# No -march=native: this code only checks and copies; the barrier's own flags live in its library.
FLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared")

_lock = threading.Lock()
_state: tuple[type | None, str | None] | None = None     # (Entry or None, why not), once per process


def _includes() -> tuple[str, str]:
    return sysconfig.get_paths()["include"], np.get_include()


def _build_key(cxx: str) -> str:
    python_inc, numpy_inc = _includes()
    parts = [SOURCE.read_text(), sys.version, str(sysconfig.get_config_var("EXT_SUFFIX")), python_inc,
             numpy_inc, np.__version__, toolchain_identity(cxx, FLAGS)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def _build() -> Path:
    """The extension's path in the cache (compiled there first if no verified entry exists)."""
    cxx = find_compiler()
    python_inc, numpy_inc = _includes()
    if not (Path(python_inc) / "Python.h").is_file():
        raise ToolchainError(f"no Python.h in {python_inc} (install the Python development headers)")
    library = MODULE + str(sysconfig.get_config_var("EXT_SUFFIX") or ".so")

    def compile_into(folder: Path) -> None:
        command = [cxx, *FLAGS, "-I", python_inc, "-I", numpy_inc, str(SOURCE), "-o", str(folder / library)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise ToolchainError("building the single-state extension failed", command, result.stderr)

    return cache.get_or_build(_build_key(cxx), library, compile_into, kind="extension") / library


def _import(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
    spec = importlib.util.spec_from_file_location(MODULE, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def entry_type() -> type | None:
    """``Entry(address, order, n, m, fallback, owner)``, built and loaded once per process, or
    None when the extension cannot be had (then ``unavailable_reason()`` says why)."""
    global _state
    with _lock:
        if _state is None:
            if os.environ.get("CBFSIM_FASTCALL", "1") == "0":
                _state = None, "CBFSIM_FASTCALL=0"
            else:
                try:
                    _state = _import(_build()).Entry, None
                except (ToolchainError, OSError, ImportError) as exc:
                    _state = None, str(exc).splitlines()[0]
        return _state[0]


def unavailable_reason() -> str | None:
    """Why ``entry_type`` returned None (None if it did not, or was not asked yet)."""
    return None if _state is None else _state[1]
