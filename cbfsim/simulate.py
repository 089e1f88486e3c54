"""Fixed-step closed-loop simulation with a zero-order hold on the control.

Every control period dt_control the nominal controller, the barrier (once, for the whole
batch) and the safety filter run; the plant is then integrated with classic RK4 in
``dt_control / dt_int`` substeps holding u constant. ``filter=None`` runs the nominal loop
(u = u_nom clipped to the input box) while still recording h. Wall-clock time spent in the
controller, barrier, filter and integrator is accumulated separately in
``metadata["timing"]`` for the benchmarks.
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from compiler.errors import CbfsimError

from .barriers import Barrier, ShapeError, as_batch, barrier_terms
from .classk import describe
from .filters.base import FilterResult, FilterStatus, SafetyFilter
from .trajectory import Trajectory


class NonFiniteStateError(CbfsimError, FloatingPointError):
    """The state became NaN/Inf; carries the step index, time, run index and state."""

    def __init__(self, step: int, time: float, state: np.ndarray, run: int = 0):
        self.step, self.time, self.run = int(step), float(time), int(run)
        self.state = np.array(state, dtype=np.float64)
        super().__init__(f"non-finite state at control step {self.step} (t = {self.time:.6g} s) "
                         f"in run {self.run}: x = {np.array2string(self.state, precision=6)}")


def _steps(total: float, step: float, what: str, per: str) -> int:
    """``total / step`` as a positive integer, or ValueError naming both numbers."""
    if not (np.isfinite(total) and np.isfinite(step) and step > 0 and total > 0):
        raise ValueError(f"{what} = {total!r} and {per} = {step!r} must be finite and > 0")
    ratio = total / step
    k = int(round(ratio))
    if k < 1 or abs(ratio - k) > 1e-9 * max(1.0, ratio):
        raise ValueError(f"{what} = {total!r} must be a whole multiple of {per} = {step!r} (ratio {ratio!r})")
    return k


def rk4_zoh(system: Any, x: np.ndarray, u: np.ndarray, dt: float, substeps: int) -> np.ndarray:
    """Integrate x' = f(x) + G(x) u over substeps * dt with u held constant (classic RK4)."""
    one = _rk4_single(system, x, u, dt, substeps)
    if one is not None:
        return one
    for _ in range(substeps):
        k1 = system.xdot(x, u)
        k2 = system.xdot(x + 0.5 * dt * k1, u)
        k3 = system.xdot(x + 0.5 * dt * k2, u)
        k4 = system.xdot(x + dt * k3, u)
        x = x + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return x


_F64 = np.dtype(np.float64)
_RK4_FLOAT: dict[int, Callable[..., list[float]]] = {}


def _rk4_float(n: int) -> Callable[..., list[float]]:
    """rk4_zoh's arithmetic for n states on Python floats, unrolled (generated once per n):
    the same operations in the same order as the array code, x + (0.5 dt) k1 ... x + (dt/6)
    (((k1 + 2 k2) + 2 k3) + k4), so the same bits, with no list or numpy call per stage."""
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
        exec(src, namespace)
        _RK4_FLOAT[n] = namespace["rk4"]
    return _RK4_FLOAT[n]


def _rk4_single(system: Any, x: np.ndarray, u: np.ndarray, dt: float, substeps: int) -> np.ndarray | None:
    """rk4_zoh for a batch of one on Python floats when the system offers an exact float
    f(x) + G(x) u (``_xdot_float``, systems/base.py, single input): bit-identical to the
    array code below without its ~30 numpy calls per step. None (use the array code) for
    anything else, on a float exception, or when the result is not finite (numpy then
    recomputes it, with its warnings)."""
    get = getattr(system, "_xdot_float", None)
    xdot = get() if get is not None else None
    if xdot is None or type(x) is not np.ndarray or type(u) is not np.ndarray or x.shape != (1, system.n) \
            or x.dtype != _F64 or u.dtype != _F64 or u.shape != (1, 1):
        return None
    try:
        xs = _rk4_float(x.shape[1])(xdot, x[0].tolist(), u.item(), dt, substeps)
    except (ArithmeticError, ValueError):
        return None
    if not all(map(math.isfinite, xs)):
        return None
    return np.array([xs])


def _describe_filter(filt: Any) -> dict:
    if filt is None:
        return {"kind": "none"}
    out: dict[str, Any] = {"kind": type(filt).__name__, "order": int(filt.order)}
    for name in ("alpha", "alpha1", "alpha2"):
        if hasattr(filt, name):
            out[name] = describe(getattr(filt, name))
    solver = getattr(filt, "solver", None)
    if solver is not None:
        out["solver"] = type(solver).__name__
        if hasattr(solver, "slack_penalty"):
            out["slack_penalty"] = float(solver.slack_penalty)
    return out


def simulate_batch(system: Any, barrier: Barrier | None, filter: SafetyFilter | None,
                   controller: Callable[[np.ndarray], np.ndarray] | str, X0: Any, t_final: float,
                   dt_control: float, dt_int: float | None = None, order: int | None = None,
                   metadata: dict | None = None) -> Trajectory:
    """Simulate B runs at once from X0 (B, n); one barrier and one filter call per control
    step for the whole batch. ``controller`` is a callable (B, n) -> (B, m) or the name of
    one of ``system.nominal``'s controllers; ``order`` defaults to the filter's."""
    if isinstance(controller, str):
        controller = system.nominal(controller)
    X = as_batch(X0, system.n, "X0").copy()
    B, n, m = X.shape[0], system.n, system.m
    T = _steps(t_final, dt_control, "t_final", "dt_control")
    dt_int = dt_control if dt_int is None else float(dt_int)
    substeps = _steps(dt_control, dt_int, "dt_control", "dt_int")
    if filter is not None:
        if barrier is None:
            raise ValueError("a safety filter needs a barrier")
        if order is not None and order != filter.order:
            raise ValueError(f"order {order} requested but {type(filter).__name__} is order {filter.order}")
        order = filter.order
        if filter.m != m:
            raise ShapeError(f"filter has m = {filter.m} inputs, system {system.name!r} has m = {m}")
        filter.reset()
    order = 1 if order is None else int(order)
    if not np.all(np.isfinite(X)):
        bad = int(np.flatnonzero(~np.isfinite(X).all(axis=1))[0])
        raise NonFiniteStateError(0, 0.0, X[bad], bad)

    t = np.arange(T + 1) * float(dt_control)
    xs = np.empty((B, T + 1, n))
    h = np.full((B, T + 1), np.nan)
    Lf, slack, solve_time = np.full((B, T), np.nan), np.zeros((B, T)), np.zeros((B, T))
    u_nom_rec, u_rec, Lg = np.empty((B, T, m)), np.empty((B, T, m)), np.full((B, T, m), np.nan)
    status = np.zeros((B, T), dtype=np.int8)
    Lf2 = np.full((B, T), np.nan) if order == 2 else None
    LgLf = np.full((B, T, m), np.nan) if order == 2 else None
    clock = dict(controller_s=0.0, barrier_s=0.0, filter_s=0.0, integration_s=0.0)
    lo, hi = system.u_min, system.u_max
    zeros, all_ok = np.zeros(B), np.full(B, FilterStatus.OK, dtype=np.int8)
    xs[:, 0] = X

    for k in range(T):
        t0 = time.perf_counter()
        u_nom = np.asarray(controller(X), dtype=np.float64)
        if u_nom.shape != (B, m):
            raise ShapeError(f"controller output: expected shape ({B}, {m}), got {u_nom.shape}")
        t1 = time.perf_counter()
        terms = barrier_terms(barrier, system, X, order) if barrier is not None else None
        t2 = time.perf_counter()
        if filter is not None:
            res = filter.filter(X, u_nom, terms)
        else:   # (the constant fields are only read: recording copies them)
            res = FilterResult(u=np.clip(u_nom, lo, hi), slack=zeros, status=all_ok, solve_time=zeros)
        t3 = time.perf_counter()
        X = rk4_zoh(system, X, res.u, dt_int, substeps)
        t4 = time.perf_counter()
        clock["controller_s"] += t1 - t0
        clock["barrier_s"] += t2 - t1
        clock["filter_s"] += t3 - t2
        clock["integration_s"] += t4 - t3

        u_nom_rec[:, k], u_rec[:, k] = u_nom, res.u
        slack[:, k], status[:, k], solve_time[:, k] = res.slack, res.status, res.solve_time
        if terms is not None:
            h[:, k], Lf[:, k], Lg[:, k] = terms.h, terms.Lf, terms.Lg
            if order == 2:
                Lf2[:, k], LgLf[:, k] = terms.Lf2, terms.LgLf
        if not (B == 1 and all(map(math.isfinite, X[0].tolist()))):   # (cheap test for one run)
            finite = np.isfinite(X).all(axis=1)
            if not finite.all():
                bad = int(np.flatnonzero(~finite)[0])
                raise NonFiniteStateError(k + 1, t[k + 1], X[bad], bad)
        xs[:, k + 1] = X

    if barrier is not None:
        t0 = time.perf_counter()
        h[:, T] = barrier.value(X)
        clock["barrier_s"] += time.perf_counter() - t0
    meta = {
        "system": getattr(system, "name", type(system).__name__),
        "state_names": list(getattr(system, "state_names", [])),
        "input_names": list(getattr(system, "input_names", [])),
        "u_min": [float(v) for v in lo], "u_max": [float(v) for v in hi],
        "barrier": type(barrier).__name__ if barrier is not None else None,
        "filter": _describe_filter(filter),
        "controller": getattr(controller, "name", getattr(controller, "__name__", type(controller).__name__)),
        "order": order, "t_final": float(t_final), "dt_control": float(dt_control), "dt_int": dt_int,
        "batch_size": B, "steps": T,
        "timing": {**clock, "barrier_calls": T + 1 if barrier is not None else 0, "filter_calls": T if filter else 0},
        **(metadata or {}),
    }
    return Trajectory(t=t, x=xs, u_nom=u_nom_rec, u=u_rec, h=h, Lf=Lf, Lg=Lg, slack=slack, status=status,
                      solve_time=solve_time, metadata=meta, Lf2=Lf2, LgLf=LgLf)


def simulate(system: Any, barrier: Barrier | None, filter: SafetyFilter | None,
             controller: Callable[[np.ndarray], np.ndarray] | str, x0: Any, t_final: float,
             dt_control: float, dt_int: float | None = None, order: int | None = None,
             metadata: dict | None = None) -> Trajectory:
    """One run from x0 (n,); returns a Trajectory with batch size 1 (see simulate_batch)."""
    x0 = np.asarray(x0, dtype=np.float64)
    if x0.shape != (system.n,):
        raise ShapeError(f"x0: expected shape ({system.n},), got {x0.shape}")
    return simulate_batch(system, barrier, filter, controller, x0[None, :], t_final, dt_control,
                          dt_int, order, metadata)
