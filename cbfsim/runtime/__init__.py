"""Compiled barriers in Python: compile with the compiler, build with g++, load with ctypes."""
from __future__ import annotations

from .binding import CompiledLie
from .build import CXXFLAGS, build_library


def compile_barrier(model, inputs: int, order: int = 1, dtype: str = "float", name: str | None = None,
                    extra_flags: tuple[str, ...] = (), layout: str = "sweep", limits=None,
                    state_shape: tuple[int, ...] | None = None) -> CompiledLie:
    """Compile a torch nn.Sequential, ONNX file or IR model and load it (cached by content).
    ``layout``: "sweep" (all directions in one pass, fastest) or "min_memory" (one at a time);
    ``limits``, ``state_shape``: as in ``compiler.api.compile_model``."""
    from compiler.api import compile_model
    from compiler.limits import DEFAULT_LIMITS
    source = compile_model(model, inputs=inputs, order=order, dtype=dtype, name=name, layout=layout,
                           limits=limits or DEFAULT_LIMITS, state_shape=state_shape)
    library = build_library(source.name, source.header, source.abi, extra_flags)
    return CompiledLie(library, dtype, header_path=library.parent / f"{source.name}.hpp", report=source.report)


__all__ = ["CompiledLie", "compile_barrier", "build_library", "CXXFLAGS"]
