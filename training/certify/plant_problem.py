"""A problem with no training card: everything from the plant's own definition.

``cbfsim certify MODEL.onnx --system NAME|module:Class`` and ``certify_module`` build the
problem here: the input box and the constraint are the plant's, the domain is the plant's
unless given, and the class-K function is given (``linear:gamma``; the filter's condition
needs it) or absent (the boundary condition has none).  The network is any ONNX file or
torch ``nn.Module`` the compiler's frontends read; nothing was trained by cbfsim.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .problem import CertifyError, Problem, assemble, load_network


def parse_class_k(text: str | None, order: int, condition: str) -> dict[str, float]:
    """The gains of ``linear:GAMMA`` (order 2: ``linear:ALPHA1,ALPHA2``, or one GAMMA for
    both).  The boundary condition has no class-K term: it takes none (gains 0)."""
    if condition == "boundary":
        if text is not None:
            raise CertifyError(f"--condition boundary has no class-K term; drop --class-k {text}")
        return {"gamma": 0.0}
    if text is None:
        raise CertifyError(f"--condition {condition} needs the filter's class-K function: --class-k linear:GAMMA "
                           "(or --condition boundary, which has none)")
    kind, _, rest = str(text).partition(":")
    try:
        values = [float(v) for v in rest.split(",")] if rest else []
    except ValueError:
        values = []
    if kind != "linear" or not values or not all(np.isfinite(v) and v > 0 for v in values) \
            or len(values) > order:
        shape = "linear:GAMMA" if order == 1 else "linear:ALPHA1,ALPHA2 (or linear:GAMMA for both)"
        raise CertifyError(f"--class-k {text!r}: expected {shape} with positive numbers (order {order})")
    if order == 1:
        return {"gamma": values[0]}
    a1, a2 = (values * 2)[:2]
    return {"alpha1": a1, "alpha2": a2}


def plant_problem(model: Any, system: Any, *, order: int = 1, class_k: str | None = None,
                  condition: str = "filter", domain_lo: Sequence[float] | None = None,
                  domain_hi: Sequence[float] | None = None, dt: float = 0.0,
                  params: dict[str, float] | None = None) -> Problem:
    """The problem of ``model`` (ONNX path or torch module) for ``system`` (a name, an import
    path ``module:Class``, or a ``ControlAffineSystem``)."""
    from systems import get_system
    from systems.base import ControlAffineSystem
    if order not in (1, 2):
        raise CertifyError(f"--order must be 1 or 2, got {order}")
    plant = system if isinstance(system, ControlAffineSystem) else get_system(str(system), **(params or {}))
    gains = parse_class_k(class_k, order, condition)
    lo, hi = plant.domain
    lo = _bounds(domain_lo, lo, plant, "--domain-lo")
    hi = _bounds(domain_hi, hi, plant, "--domain-hi")
    if np.any(lo >= hi):
        i = int(np.flatnonzero(lo >= hi)[0])
        raise CertifyError(f"the domain is empty in {plant.state_names[i]}: {lo[i]:g} >= {hi[i]:g}")
    network, digest = load_network(model)
    problem = assemble(network, digest, plant, order=order, gains=gains, u_lo=plant.u_min, u_hi=plant.u_max,
                       lo=lo, hi=hi, dt=float(dt), config={}, where=f"system {plant.name!r}")
    problem.backup = None                    # no trainer's backup rollout: no backup-safe statistics
    if not isinstance(system, str):          # an instance: its import path and its parameters, for the replay
        import dataclasses
        params = dataclasses.asdict(plant.params) if dataclasses.is_dataclass(plant.params) else {}
    problem.spec = {"system": system if isinstance(system, str) else _import_path(plant), "params": dict(params or {}),
                    "order": order, "class_k": class_k, "domain_lo": lo.tolist(), "domain_hi": hi.tolist(),
                    "u_min": plant.u_min.tolist(), "u_max": plant.u_max.tolist(),
                    "constraint": str(plant.constraint_expr)}
    return problem


def _bounds(given: Sequence[float] | None, default: np.ndarray, plant: Any, flag: str) -> np.ndarray:
    if given is None:
        return np.asarray(default, float)
    values = np.asarray(given, dtype=float).reshape(-1)
    if values.size != plant.n:
        raise CertifyError(f"{flag} needs {plant.n} numbers ({', '.join(plant.state_names)}), got {values.size}")
    if not np.all(np.isfinite(values)):
        raise CertifyError(f"{flag} must be finite numbers, got {values.tolist()}")
    return values


def _import_path(plant: Any) -> str:
    """``module:Class`` of a plant instance (its built-in name when the registry knows it by that)."""
    from systems.registry import BUILTIN
    cls = type(plant)
    if plant.name in BUILTIN and type(BUILTIN[plant.name]()) is cls:
        return plant.name
    return f"{cls.__module__}:{cls.__qualname__}"
