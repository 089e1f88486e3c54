"""Compiled barriers in Python: compile with the compiler, build with g++, load with ctypes.

The pipeline lives in the compiler package (``compiler.api.compile_barrier``,
``compiler.build``, ``compiler.cache``, ``compiler.load``), so that ``training`` and
``cbfsim`` both depend on it downward; these are its user-facing names. They resolve on
first use (PEP 562), so ``cbfsim cache`` does not load the compiler's scipy.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from cbfsim.lazy import lazy_exports

if TYPE_CHECKING:   # for type checkers and the API docs (mkdocstrings reads the source); not run
    from compiler.api import compile_barrier
    from compiler.build import CXXFLAGS, build_library
    from compiler.load import CompiledLie

_EXPORTS: dict[str, str] = {
    "CompiledLie": "compiler.load",
    "compile_barrier": "compiler.api",
    "build_library": "compiler.build",
    "CXXFLAGS": "compiler.build",
}
__all__ = ["CompiledLie", "compile_barrier", "build_library", "CXXFLAGS"]


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
