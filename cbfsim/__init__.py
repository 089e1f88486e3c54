"""cbfsim: closed-loop simulation of neural control-barrier-function safety filters.

The curated public API, importable from the top level (``from cbfsim import simulate``).
Names resolve lazily on first use (PEP 562), so ``import cbfsim`` loads neither torch, the
compiler nor osqp/scipy (the CLI starts fast). ``simulate`` and ``simulate_batch`` are lazy too:
the package refuses to let the import system bind the submodule ``cbfsim.simulate`` over the
function of the same name, so ``cbfsim.simulate`` is always the function.

Compile and load a barrier: ``compile_barrier``. Barriers: ``CompiledBarrier``,
``TorchBarrier``, ``AnalyticBarrier``. Filters: ``CBFQP``, ``HOCBFQP``, ``CBFProjection``,
``FilterStatus``. Class-K functions: ``Linear``, ``Cubic``, ``Power``, ``Tanh``. Simulation:
``simulate``, ``simulate_batch``, ``Trajectory``, ``RunFate`` (each run's fate); model error: ``Perturbation``,
``disturbance_margin``. Plants: ``get_system``. Errors: ``CbfsimError`` is the root of every
error cbfsim raises on purpose. Campaigns: ``cbfsim.campaign``; the compiled closed loop:
``cbfsim.engine``.
"""
from __future__ import annotations

import sys
import types
from typing import Any

from .lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "compile_barrier": "cbfsim.runtime",
    "AnalyticBarrier": "cbfsim.barriers",
    "CompiledBarrier": "cbfsim.barriers",
    "TorchBarrier": "cbfsim.barriers",
    "LieTerms": "cbfsim.barriers",
    "LieTerms2": "cbfsim.barriers",
    "CBFQP": "cbfsim.filters",
    "HOCBFQP": "cbfsim.filters",
    "CBFProjection": "cbfsim.filters",
    "FilterStatus": "cbfsim.filters",
    "Linear": "cbfsim.classk",
    "Cubic": "cbfsim.classk",
    "Power": "cbfsim.classk",
    "Tanh": "cbfsim.classk",
    "Trajectory": "cbfsim.trajectory",
    "RunStatus": "cbfsim.trajectory",
    "RunFate": "cbfsim.fate",
    "Perturbation": "cbfsim.perturb",
    "disturbance_margin": "cbfsim.perturb",
    "get_system": "systems",
    "CbfsimError": "compiler.errors",
    "simulate": "cbfsim.simulate",
    "simulate_batch": "cbfsim.simulate",
}
_SHADOWED = ("simulate", "simulate_batch")   # submodule (or its parent) names that are also functions

__all__ = sorted(_EXPORTS)


class _Package(types.ModuleType):
    """The cbfsim module, keeping ``simulate`` the function when the submodule is imported."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return          # the import system binding cbfsim.simulate (the module); the function keeps the name
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
