"""One orchestrator: load a model from any frontend, canonicalize, emit header + shim,
write them atomically (``compile_model``), or also build and load them (``compile_barrier``).
The command line and the Python runtime both call this."""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .cost import CostReport, cost_report
from .emit_abi import emit_abi
from .emit_cpp import EmitOptions, emit_header
from .errors import UnsupportedOpError
from .identifiers import check_identifier, sanitize_identifier
from .ir import Model
from .limits import DEFAULT_LIMITS, Limits
from .passes import canonicalize
from .publish import atomic_write_all

if TYPE_CHECKING:
    from .load import CompiledLie


@dataclass(frozen=True)
class CompiledSource:
    name: str
    header: str          # NAME.hpp
    abi: str             # NAME_abi.cpp
    report: CostReport
    model: Model
    options: EmitOptions

    def write(self, directory: str | os.PathLike) -> tuple[Path, Path]:
        """Write NAME.hpp and NAME_abi.cpp, both or neither: on any failure no new file is left."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        paths = (directory / f"{self.name}.hpp", directory / f"{self.name}_abi.cpp")
        atomic_write_all(dict(zip(paths, (self.header, self.abi))))
        return paths


def load_model(source, name: str | None = None, limits: Limits = DEFAULT_LIMITS,
               state_shape: tuple[int, ...] | None = None) -> Model:
    """IR from a torch ``nn.Module``, an ONNX file / bytes / ModelProto, or an IR Model.
    ``state_shape``: a torch model's state shape when it is not a vector (its nn.Flatten
    then flattens it in C order)."""
    if isinstance(source, Model):
        model = source
    elif isinstance(source, (str, os.PathLike, bytes)) or type(source).__name__ == "ModelProto":
        if isinstance(source, (str, os.PathLike)) and Path(source).suffix.lower() not in (".onnx",):
            raise UnsupportedOpError(f"{source}: only ONNX files are read from disk (never pickles); "
                                     "export with torch.onnx.export first")
        from .frontend_onnx import load_onnx
        model = load_onnx(source, limits=limits)
        if name is None and isinstance(source, (str, os.PathLike)):
            name = Path(source).stem
    else:
        from .frontend_torch import load_torch
        model = load_torch(source, state_shape=state_shape, limits=limits)
    if name is not None:
        model = replace(model, name=name)
    return model


def compile_model(source, inputs: int, order: int = 1, dtype: str = "float", name: str | None = None,
                  layout: str = "sweep", limits: Limits = DEFAULT_LIMITS,
                  state_shape: tuple[int, ...] | None = None, math: tuple[str, ...] = ()) -> CompiledSource:
    """Compile a barrier into header + shim text (nothing written). ``limits`` bound folded
    constants, weights and workspace (checked before allocating); see ``load_model`` for
    ``state_shape``. ``math`` names header math functions wanted beyond the activations'
    (e.g. ("sin", "cos") for firmware plant code)."""
    options = EmitOptions(inputs=inputs, order=order, scalar=dtype, layout=layout, math=tuple(math))
    options.check()                       # before loading anything: a bad option costs nothing
    model = load_model(source, name, limits, state_shape)
    model = replace(model, name=check_identifier(name) if name else sanitize_identifier(model.name))
    model = canonicalize(model, limits)
    options.check_sizes(model)
    plan = cost_report(model, inputs, order, 4 if dtype == "float" else 8, layout)
    limits.check("max_workspace_bytes", plan.workspace_bytes,
                 f"the workspace of {model.name!r} ({plan.workspace_formula})")
    header, report = emit_header(model, options)
    return CompiledSource(model.name, header, emit_abi(model.name, options, report), report, model, options)


def compile_barrier(model, inputs: int, order: int = 1, dtype: str = "float", name: str | None = None,
                    extra_flags: tuple[str, ...] = (), layout: str = "sweep", limits: Limits | None = None,
                    state_shape: tuple[int, ...] | None = None) -> CompiledLie:
    """Compile a torch nn.Sequential, ONNX file or IR model, build it (cached by content) and
    load it. ``layout``: "sweep" (all directions in one pass, fastest) or "min_memory" (one at
    a time); ``limits``, ``state_shape``: as in ``compile_model``. The user-facing name is
    ``cbfsim.runtime.compile_barrier`` (this function)."""
    from .build import build_library
    from .load import CompiledLie
    source = compile_model(model, inputs=inputs, order=order, dtype=dtype, name=name, layout=layout,
                           limits=limits or DEFAULT_LIMITS, state_shape=state_shape)
    library = build_library(source.name, source.header, source.abi, extra_flags)
    lie = CompiledLie(library, dtype, header_path=library.parent / f"{source.name}.hpp", report=source.report)
    lie.source_model = model           # what it was compiled from (the compiled engine rebuilds from it)
    return lie
