"""Single-run fast path of the simulator: a float twin of the RK4 array code in simulate.py.

A single trajectory integrates a batch of one state, and there the ~30 numpy calls per RK4
step cost more than the arithmetic. ``rk4_single`` runs the same operations in the same
order as ``simulate._rk4_array`` on Python floats, x + (0.5 dt) k1 ... x + (dt/6)
(((k1 + 2 k2) + 2 k3) + k4), calling the plant's own float twin of f(x) + G(x) u
(``ControlAffineSystem.float_xdot``, systems/_fast.py; single-input plants), so it gives
the same bits (tests/test_fast_paths.py checks that with np.array_equal over many-step
trajectories of every plant). It answers None, and the array code runs, for anything
else: no plant twin, a batch of more than one, a float exception, or a non-finite or diverged
result (|x_i| > fate.DIVERGENCE_BOUND; numpy then recomputes it, with its warnings, and the
simulator marks the fault).

Switch: the environment variable ``CBFSIM_FAST_PATHS=0`` turns every fast path off (the
same variable switches off the plants' and the filters' twins). It is read once, by
``fast_paths_enabled``; a process that changes it (a test comparing both paths) calls
``fast_paths_enabled.cache_clear()`` afterwards. ``rk4_single`` is the one entry point
(simulate.py's ``_integrate``).
"""
from __future__ import annotations

import functools
import os
from typing import Any, Callable

import numpy as np

from .fate import DIVERGENCE_BOUND

FAST_PATHS_ENV = "CBFSIM_FAST_PATHS"
_F64 = np.dtype(np.float64)
_RK4_FLOAT: dict[int, Callable[..., list[float]]] = {}


@functools.cache
def fast_paths_enabled() -> bool:
    """False when the environment sets CBFSIM_FAST_PATHS=0. Read once (an os.environ lookup
    of an unset variable costs about as much as the twin saves); after changing the variable
    in-process call ``fast_paths_enabled.cache_clear()``."""
    return os.environ.get(FAST_PATHS_ENV, "1") != "0"


def _rk4_float(n: int) -> Callable[..., list[float]]:
    """The RK4 arithmetic for n states on Python floats, unrolled (generated once per n)."""
    if n not in _RK4_FLOAT:
        x = [f"x{i}" for i in range(n)]
        k = [[f"k{s}_{i}" for i in range(n)] for s in range(1, 5)]

        def tup(names: list[str]) -> str:
            return ", ".join(names) + ","

        def stage(step: str, prev: list[str]) -> str:
            return ", ".join(f"{xi} + {step} * {ki}" for xi, ki in zip(x, prev))
        final = ", ".join(f"{xi} + sixth * ({a} + 2.0 * {b} + 2.0 * {c} + {d})"
                          for xi, a, b, c, d in zip(x, *k))
        src = "\n".join([
            "def rk4(xdot, x, u0, dt, substeps):",
            f"    {tup(x)} = x",
            "    half, sixth = 0.5 * dt, dt / 6.0",
            "    for _ in range(substeps):",
            f"        {tup(k[0])} = xdot({', '.join(x)}, u0)",
            f"        {tup(k[1])} = xdot({stage('half', k[0])}, u0)",
            f"        {tup(k[2])} = xdot({stage('half', k[1])}, u0)",
            f"        {tup(k[3])} = xdot({stage('dt', k[2])}, u0)",
            f"        {tup(x)} = {final},",
            f"    return [{', '.join(x)}]",
        ])
        namespace: dict[str, Any] = {}
        exec(src, namespace)                   # generated from n only
        _RK4_FLOAT[n] = namespace["rk4"]
    return _RK4_FLOAT[n]


def rk4_single(system: Any, x: np.ndarray, u: np.ndarray, dt: float, substeps: int) -> np.ndarray | None:
    """The RK4 zero-order-hold step for a batch of one ((1, n) state, (1, 1) input) on
    Python floats, a finite (1, n) array within the divergence bound, bit-identical to the
    array code; or None (fast paths off, no plant twin, anything else, float exception,
    non-finite or diverged result)."""
    if not fast_paths_enabled():
        return None
    get = getattr(system, "float_xdot", None)
    xdot = get() if get is not None else None
    if xdot is None or type(x) is not np.ndarray or type(u) is not np.ndarray or x.shape != (1, system.n) \
            or x.dtype != _F64 or u.dtype != _F64 or u.shape != (1, 1):
        return None
    try:
        xs = _rk4_float(x.shape[1])(xdot, x[0].tolist(), u.item(), dt, substeps)
    except (ArithmeticError, ValueError):
        return None
    if not all(abs(v) <= DIVERGENCE_BOUND for v in xs):      # (NaN compares false)
        return None
    return np.array([xs])
