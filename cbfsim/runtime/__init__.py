"""Compiled barriers in Python: compile with the compiler, build with g++, load with ctypes.

The pipeline lives in the compiler package (``compiler.api.compile_barrier``,
``compiler.build``, ``compiler.cache``, ``compiler.load``), so that ``training`` and
``cbfsim`` both depend on it downward; these are its user-facing names.
"""
from __future__ import annotations

from compiler.api import compile_barrier
from compiler.build import CXXFLAGS, build_library
from compiler.load import CompiledLie

__all__ = ["CompiledLie", "compile_barrier", "build_library", "CXXFLAGS"]
