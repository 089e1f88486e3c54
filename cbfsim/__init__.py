"""cbfsim: closed-loop simulation of neural control-barrier-function safety filters.

The curated public API, importable from the top level (``from cbfsim import simulate``).
Names resolve lazily on first use, so ``import cbfsim`` loads neither torch nor the compiler;
``simulate`` and ``simulate_batch`` are bound at import, because the submodule of the same
name would otherwise shadow the function once anything imports ``cbfsim.simulate``.

Compile and load a barrier: ``compile_barrier``. Barriers: ``CompiledBarrier``,
``TorchBarrier``, ``AnalyticBarrier``. Filters: ``CBFQP``, ``HOCBFQP``, ``CBFProjection``,
``FilterStatus``. Class-K functions: ``Linear``, ``Cubic``, ``Power``, ``Tanh``. Simulation:
``simulate``, ``simulate_batch``, ``Trajectory``, ``RunFate`` (each run's fate); model error: ``Perturbation``,
``disturbance_margin``. Plants: ``get_system``. Errors: ``CbfsimError`` is the root of every
error cbfsim raises on purpose. Campaigns: ``cbfsim.campaign``; the compiled closed loop:
``cbfsim.engine``.
"""
from __future__ import annotations

import importlib
from typing import Any

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
}

from .simulate import simulate, simulate_batch  # noqa: E402  (see the docstring)

__all__ = sorted([*_EXPORTS, "simulate", "simulate_batch"])


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'cbfsim' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
