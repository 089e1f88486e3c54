"""Fixed-step closed-loop simulation with a zero-order hold on the control.

Every control period dt_control the nominal controller, the barrier (once, for the whole
batch) and the safety filter run; the plant is then integrated with classic RK4 in
``dt_control / dt_int`` substeps holding u constant. ``filter=None`` runs the nominal loop
(u = u_nom clipped to the input box) while still recording h. Wall-clock time spent in the
controller, barrier, filter and integrator is accumulated separately in
``metadata["timing"]`` for the benchmarks.

Each run's fate (cbfsim/fate.py: completed, left_set, faulted) is recorded in
``metadata["fates"]``. A run whose state becomes non-finite or diverges (|x_i| >
fate.DIVERGENCE_BOUND; a start state beyond it faults at step 0) stops and is marked
(``Trajectory.run_status``, ``metadata["faults"]``) while the rest of the batch finishes;
``on_fault="raise"`` raises instead. A horizon whose record cannot fit in memory is refused
before anything is allocated. Single runs integrate through a float twin of the RK4 code where the plant has
one (cbfsim/_fast_sim.py; same bits; ``CBFSIM_FAST_PATHS=0`` turns it off).
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable

import numpy as np

from compiler.errors import CbfsimError

from .barriers import Barrier, ShapeError, as_batch, barrier_terms, check_terms_call
from .classk import describe
from .fate import DIVERGENCE_BOUND, classify, constraint_values, diverged, fault_cause
from . import _fast_sim
from .filters.base import FilterResult, FilterStatus, SafetyFilter
from .perturb import ActivePerturbation, Disturbed, Perturbation, PerturbationError, neutral_input
from .preflight import initial_state_findings, report as report_findings
from .trajectory import STEP_NOT_RUN, RunStatus, Trajectory


class NonFiniteStateError(CbfsimError, FloatingPointError):
    """The state became NaN/Inf or diverged (raised with ``on_fault="raise"``, or for a
    non-finite X0); carries the control instant, time, run index and state, and
    ``trajectory``: every run up to that instant (None for X0)."""

    def __init__(self, step: int, time: float, state: np.ndarray, run: int = 0,
                 trajectory: Trajectory | None = None):
        self.step, self.time, self.run = int(step), float(time), int(run)
        self.state = np.array(state, dtype=np.float64)
        self.trajectory = trajectory
        kind = "non-finite" if not np.isfinite(self.state).all() else "diverged"
        super().__init__(f"{kind} state at control step {self.step} (t = {self.time:.6g} s) "
                         f"in run {self.run}: x = {np.array2string(self.state, precision=6)}")


class TrajectoryTooLargeError(CbfsimError, MemoryError):
    """The arrays a simulation records would not fit in the available memory."""


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
    return _integrate(system, x, u, dt, substeps)[0]


def _rk4_array(system: Any, x: np.ndarray, u: np.ndarray, dt: float, substeps: int) -> np.ndarray:
    for _ in range(substeps):
        k1 = system.xdot(x, u)
        k2 = system.xdot(x + 0.5 * dt * k1, u)
        k3 = system.xdot(x + 0.5 * dt * k2, u)
        k4 = system.xdot(x + dt * k3, u)
        x = x + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return x


def _integrate(system: Any, x: np.ndarray, u: np.ndarray, dt: float, substeps: int) -> tuple[np.ndarray, bool]:
    """The one dispatch between the simulator's float twin (cbfsim/_fast_sim.py) and the
    array code: (next state, True when the twin ran, whose result is always finite and
    within the divergence bound)."""
    one = _fast_sim.rk4_single(system, x, u, dt, substeps)
    if one is not None:
        return one, True
    return _rk4_array(system, x, u, dt, substeps), False


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


def _record_bytes(B: int, T: int, n: int, m: int, order: int) -> int:
    """Bytes of the arrays a run of B x T steps records (see the allocation in simulate_batch)."""
    per_instant = 8 * (n + 1)                                 # x, h
    per_step = 8 * (3 * m + 3) + 1                            # u_nom, u, Lg; Lf, slack, solve_time; status
    if order == 2:
        per_step += 8 * (m + 1)                               # LgLf, Lf2
    return B * ((T + 1) * per_instant + T * per_step) + 8 * (T + 1)


def _available_memory() -> int | None:
    """Bytes the process may still allocate (MemAvailable + SwapFree), None where unknown."""
    try:
        with open("/proc/meminfo") as fh:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in fh if line.split()[1:2]}
        return info["MemAvailable"] + info.get("SwapFree", 0)
    except (OSError, KeyError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def _check_memory(B: int, T: int, n: int, m: int, order: int) -> None:
    """Refuse, before allocating anything, a run whose record cannot fit in memory."""
    need = _record_bytes(B, T, n, m, order) + 8 * B * (T + 1)    # (+ the constraint the fates are judged by)
    if need < 1 << 26:                    # (64 MiB: not worth reading /proc/meminfo)
        return
    have = _available_memory()
    if have is not None and need > have:
        raise TrajectoryTooLargeError(
            f"simulation too large: {B:,} run(s) x {T:,} control steps x {n} states (+ inputs, h, "
            f"Lie terms) need {need:.3g} bytes of trajectory arrays, more than the {have:.3g} bytes "
            f"of memory available; shorten t_final, lengthen dt_control or split the batch")


def _fault(run: int, step: int, time: float, state: np.ndarray, u: np.ndarray | None = None) -> dict:
    """A fault record; ``u``: the input applied over the period before, named when it was the
    input that was not finite."""
    cause = fault_cause(state)
    if u is not None and not np.isfinite(u).all():
        cause += f", after a non-finite input u = {np.array2string(np.asarray(u), precision=6)}"
    return {"run": run, "step": step, "time": time, "cause": cause}


def _stop_runs(rec: dict[str, np.ndarray], fault_step: np.ndarray) -> None:
    """Blank what stopped runs did not compute: x after the fault instant s, h from s on,
    and every per-step array from step s on (status STEP_NOT_RUN)."""
    instants = np.arange(rec["x"].shape[1])[None, :]
    s = fault_step[:, None]
    rec["x"][instants > s] = np.nan
    rec["h"][instants >= s] = np.nan
    after = instants[:, :-1] >= s
    for name, value in rec.items():
        if name in ("x", "h") or value is None:
            continue
        value[after] = STEP_NOT_RUN if name == "status" else np.nan


def simulate_batch(system: Any, barrier: Barrier | None, filter: SafetyFilter | None,
                   controller: Callable[[np.ndarray], np.ndarray] | str, X0: Any, t_final: float,
                   dt_control: float, dt_int: float | None = None, order: int | None = None,
                   metadata: dict | None = None, on_fault: str = "stop", strict: bool = False,
                   perturbation: Perturbation | None = None, run_seeds: Any = None,
                   engine: str = "numpy") -> Trajectory:
    """Simulate B runs at once from X0 (B, n); one barrier and one filter call per control
    step for the whole batch. ``controller`` is a callable (B, n) -> (B, m) or the name of
    one of ``system.nominal``'s controllers; ``order`` defaults to the filter's.

    Runs that start outside the constraint set, or outside the set the filter keeps invariant
    ({h >= 0}; {h >= 0, psi1 >= 0} for an HOCBF filter), are warned about (PreflightWarning)
    and listed in ``metadata["preflight"]``; ``strict=True`` refuses them (UnsafeRunError).

    Each run's fate (completed, left_set, faulted: cbfsim/fate.py) is in ``metadata["fates"]``.
    A run whose state becomes non-finite or diverged (|x_i| > fate.DIVERGENCE_BOUND; a start
    beyond it faults at step 0) stops there and the others go on (``on_fault="stop"``, see
    trajectory.py: ``run_status``, ``metadata["faults"]``); its row is held at its initial
    state (0 for a diverged start) from then on, so the batch calls see only finite states,
    and its record is blanked.
    ``on_fault="raise"`` raises NonFiniteStateError at the first fault instead, carrying the
    trajectory of every run up to that instant. A record larger than the available memory
    is refused up front (TrajectoryTooLargeError).

    ``perturbation`` (cbfsim/perturb.py) adds disturbances, a mismatched plant, measurement
    noise and input delay; ``run_seeds`` (B,) keys each run's random draws (default
    perturbation.seed + 0..B-1), so any run replays alone. With a perturbation, ``h`` is
    recorded at the true state and ``u`` is the input applied in each period (with a delay,
    the filter's output ``delay`` periods earlier); ``metadata["perturbation"]`` holds it all.

    A plant's periodic coordinates (``system.periodic``) are wrapped into [lo, lo + P) at the
    start and after every control period (``system.wrap``), as the compiled engine and the
    firmware do.

    ``engine="compiled"`` runs the same loop as the firmware does, in float32, in one C++ call
    (cbfsim/engine.py: bit-identical to the host twin; what it cannot run it refuses in one line)."""
    if engine not in ("numpy", "compiled"):
        raise ValueError(f"engine must be 'numpy' or 'compiled', got {engine!r}")
    if engine == "compiled":
        from .engine import simulate_objects
        dt_sub = dt_control if dt_int is None else dt_int
        return simulate_objects(system, barrier, filter, controller, X0, t_final, dt_control,
                                _steps(dt_control, dt_sub, "dt_control", "dt_int"), perturbation, run_seeds)
    if on_fault not in ("stop", "raise"):
        raise ValueError(f"on_fault must be 'stop' or 'raise', got {on_fault!r}")
    if isinstance(controller, str):
        controller = system.nominal(controller)
    X = as_batch(X0, system.n, "X0").copy()
    wrap = _wrapper(system)
    if wrap is not None:
        X = wrap(X)
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
    order = 1 if order is None else int(order)
    if not np.all(np.isfinite(X)):
        bad = int(np.flatnonzero(~np.isfinite(X).all(axis=1))[0])
        raise NonFiniteStateError(0, 0.0, X[bad], bad)
    _check_memory(B, T, n, m, order)
    pert = ActivePerturbation(perturbation, system, run_seeds, B) if perturbation is not None else None
    if pert is not None and pert.kind == "worst_case" and barrier is None:
        raise PerturbationError("a worst-case disturbance follows -grad h: it needs a barrier")
    plant = system if pert is None else pert.plant
    every = np.arange(B)
    outputs: list[np.ndarray] = []          # the filter's outputs still waiting out the delay
    preflight = report_findings(_initial_findings(system, barrier, filter, X, order), strict, where="simulate")
    if filter is not None:
        filter.reset()

    t = np.arange(T + 1) * float(dt_control)
    rec: dict[str, Any] = {
        "x": np.empty((B, T + 1, n)), "h": np.full((B, T + 1), np.nan),
        "u_nom": np.empty((B, T, m)), "u": np.empty((B, T, m)), "Lf": np.full((B, T), np.nan),
        "Lg": np.full((B, T, m), np.nan), "slack": np.zeros((B, T)), "status": np.zeros((B, T), dtype=np.int8),
        "solve_time": np.zeros((B, T)),
        "Lf2": np.full((B, T), np.nan) if order == 2 else None,
        "LgLf": np.full((B, T, m), np.nan) if order == 2 else None,
    }
    xs, h = rec["x"], rec["h"]
    clock = dict(controller_s=0.0, barrier_s=0.0, filter_s=0.0, integration_s=0.0)
    lo, hi = system.u_min, system.u_max
    zeros, all_ok = np.zeros(B), np.full(B, FilterStatus.OK, dtype=np.int8)
    xs[:, 0] = X
    X_init = X.copy()
    alive = np.ones(B, dtype=bool)
    fault_step = np.full(B, T + 1)       # first instant with a non-finite or diverged state (T + 1: none)
    faults: list[dict] = []

    def finish(steps: int) -> Trajectory:
        run_status = np.where(alive, RunStatus.COMPLETED, RunStatus.FAULTED).astype(np.int8)
        extra = {"preflight": preflight, **({"perturbation": pert.record} if pert is not None else {})}
        meta = _metadata(system, barrier, filter, controller, order, t_final, dt_control, dt_int, B, steps,
                         clock, faults, {**extra, **(metadata or {})})
        cut = {k: (v if v is None else v[:, :steps + (1 if k in ("x", "h") else 0)]) for k, v in rec.items()}
        if faults:
            _stop_runs(cut, fault_step)
        meta["fates"] = [f.to_dict() for f in classify(constraint_values(system, cut["x"]), t[:steps + 1], cut["x"],
                                                       fault_step, {f["run"]: f["cause"] for f in faults})]
        return Trajectory(t=t[:steps + 1], metadata=meta, run_status=run_status, **cut)

    bad = diverged(X)                    # a start beyond the divergence bound faults at step 0
    for i in np.flatnonzero(bad).tolist():
        faults.append(_fault(i, 0, 0.0, X[i]))
    if bad.any():
        fault_step[bad], alive[bad] = 0, False
        if on_fault == "raise":
            first = faults[0]["run"]
            raise NonFiniteStateError(0, 0.0, X[first], first, finish(0))
        X[bad] = X_init[bad] = 0.0       # a finite stand-in the batch calls handle

    # Everything that cannot change within the run is decided here, once (issue 24): the
    # barrier's checks and entry, the perturbation's neutral paths, the record views. Each
    # step then makes the calls a hand-written loop makes, in the same order (same bits).
    terms_at = _terms_function(barrier, system, order)
    noisy = pert is not None and bool(pert.noise.any())
    second = order == 2 and terms_at is not None
    u_shape = (B, m)
    # step-major views of the records: step k writes whole rows r[k] (one index, no slice)
    r_x, r_h, r_unom, r_u, r_slack, r_status, r_time, r_Lf, r_Lg = (
        np.swapaxes(rec[key], 0, 1) for key in ("x", "h", "u_nom", "u", "slack", "status", "solve_time", "Lf", "Lg"))
    r_Lf2, r_LgLf = (np.swapaxes(rec["Lf2"], 0, 1), np.swapaxes(rec["LgLf"], 0, 1)) if order == 2 else (None, None)
    running = B - int(bad.sum())         # runs still alive (a Python int: no array reduction per step)
    # One run of a one-input plant, the common single simulation: each step's values are
    # appended as one tuple of Python floats (a fraction of the numpy assignments they stand
    # for) and written into the records in one go (``_flush``, before ``finish``): the same
    # float64 values. The clock's stamps are kept the same way and summed there.
    lists: tuple[list, list] | None = ([], []) if B == 1 and m == 1 else None
    step_row, term_row = (lists[0].append, lists[1].append) if lists is not None else (None, None)
    stamps: list[tuple[float, ...]] = []
    stamp, perf = stamps.append, time.perf_counter
    asarray, F64 = np.asarray, np.float64
    lie = barrier.lie if terms_at is not None and order == 1 else None
    f, G = system.f, system.G

    for k in range(T):
        if not running:
            break                         # nothing left to simulate (the record is blanked)
        t0 = perf()
        seen = X if pert is None else pert.measured(X, k, every)
        u_nom = asarray(controller(seen), dtype=F64)
        if u_nom.shape != u_shape:
            raise ShapeError(f"controller output: expected shape ({B}, {m}), got {u_nom.shape}")
        t1 = perf()
        if lie is not None:              # order 1: barrier_terms' calls, inline
            terms = lie(seen, f(seen), G(seen))
        else:
            terms = terms_at(seen) if terms_at is not None else None
        t2 = perf()
        if filter is not None:
            res = filter.filter(seen, u_nom, terms)
        else:   # (the constant fields are only read: recording copies them)
            res = FilterResult(u=np.clip(u_nom, lo, hi), slack=zeros, status=all_ok, solve_time=zeros)
        t3 = perf()
        u_now = res.u
        if pert is None:
            step = plant
        else:
            u_now = _delayed(outputs, res.u, pert.delay, system)
            d = pert.disturbance(X, k, every, barrier, m)
            step = plant if d is None else Disturbed(plant, d if not faults else d[alive])
        if faults:                       # stopped runs are not integrated: their rows stay put
            X = X.copy()
            X[alive], finite = _integrate(step, X[alive], u_now[alive], dt_int, substeps)
        else:
            X, finite = _integrate(step, X, u_now, dt_int, substeps)
        if wrap is not None:             # periodic coordinates back into [lo, lo + P) once per period
            X = wrap(X)
        stamp((t0, t1, t2, t3, perf()))

        if lists is None:
            r_unom[k], r_u[k] = u_nom, u_now
            r_slack[k], r_status[k], r_time[k] = res.slack, res.status, res.solve_time
            if terms is not None:
                r_h[k], r_Lf[k], r_Lg[k] = terms.h, terms.Lf, terms.Lg
                if noisy:
                    r_h[k] = barrier.value(xs[:, k])       # safety is judged at the true state
                if second:
                    r_Lf2[k], r_LgLf[k] = terms.Lf2, terms.LgLf
        else:                            # one value each (B = m = 1): the same float64s, as floats
            step_row((u_nom.item(), u_now.item(), res.slack.item(), res.status.item(), res.solve_time.item()))
            if terms is not None:
                h_k = terms.h.item() if not noisy else barrier.value(xs[:, k]).item()
                if second:
                    term_row((h_k, terms.Lf.item(), terms.Lg.item(), terms.Lf2.item(), terms.LgLf.item()))
                else:
                    term_row((h_k, terms.Lf.item(), terms.Lg.item()))
        r_x[k + 1] = X
        if not finite and not _within_bound(X) and (bad := diverged(X) & alive).any():
            for i in np.flatnonzero(bad).tolist():
                faults.append(_fault(i, k + 1, float(t[k + 1]), X[i], u_now[i]))
            fault_step[bad] = k + 1
            alive &= ~bad
            running = int(alive.sum())
            if on_fault == "raise":
                _flush(rec, lists, stamps, clock)
                first = faults[0]["run"]
                raise NonFiniteStateError(k + 1, t[k + 1], X[first], first, finish(k + 1))
            X[bad] = X_init[bad]          # a finite stand-in the batch calls already handled

    _flush(rec, lists, stamps, clock)
    if barrier is not None and running:
        t0 = time.perf_counter()
        h[:, T] = barrier.value(X)
        clock["barrier_s"] += time.perf_counter() - t0
    return finish(T)


# the per-step records a single run of a one-input plant keeps as rows of floats (simulate_batch)
STEP_ROW = ("u_nom", "u", "slack", "status", "solve_time")
TERM_ROW = ("h", "Lf", "Lg", "Lf2", "LgLf")


def _flush(rec: dict[str, Any], lists: tuple[list, list] | None, stamps: list, clock: dict[str, float]) -> None:
    """Write what the loop kept in lists into the records (run 0 from step 0: each step's
    STEP_ROW values, then TERM_ROW values) and sum the clock's stamps into ``clock``."""
    for keys, rows in zip((STEP_ROW, TERM_ROW), lists or ()):
        if rows:
            columns = np.array(rows, dtype=np.float64)
            for j, key in enumerate(keys[:columns.shape[1]]):
                target = rec[key][0, :len(rows)]
                target[...] = columns[:, j].reshape(target.shape)
    if stamps:
        spent = np.diff(np.array(stamps), axis=1).sum(axis=0).tolist()
        clock.update(zip(("controller_s", "barrier_s", "filter_s", "integration_s"), spent))


def _terms_function(barrier: Barrier | None, system: Any, order: int) -> Callable[[np.ndarray], Any] | None:
    """``barrier_terms(barrier, system, ., order)`` for the loop's float64 (B, n) states, with
    its checks made once here instead of every step (the same calls, so the same bits)."""
    if barrier is None:
        return None
    check_terms_call(barrier, system, order)
    f, G = system.f, system.G
    if order == 1:
        lie = barrier.lie
        return lambda X: lie(X, f(X), G(X))
    lie2, df, asarray, F64 = barrier.lie2, system.df, np.asarray, np.float64

    def terms2(X: np.ndarray) -> Any:
        F = asarray(f(X), dtype=F64)
        Gx = G(X)
        return lie2(X, F, Gx, df(X, F), df(X, asarray(Gx, dtype=F64)))
    return terms2


def _within_bound(X: np.ndarray) -> bool:
    """Every entry finite and within fate.DIVERGENCE_BOUND (NaN compares false): the common
    case after an array RK4 step, decided without numpy's reductions for a few states."""
    if X.size <= 16:                     # (True implies every |x_i| <= the bound; NaN, inf: False)
        return sum(map(abs, X.ravel().tolist())) <= DIVERGENCE_BOUND
    with np.errstate(invalid="ignore"):
        return bool((np.abs(X) <= DIVERGENCE_BOUND).all())


def _wrapper(system: Any) -> Callable[[np.ndarray], np.ndarray] | None:
    """``system.wrap`` for a plant with periodic coordinates, None otherwise (the loop then
    touches no bit of the state)."""
    return system.wrap if getattr(system, "periodic", None) else None


def _delayed(outputs: list[np.ndarray], u: np.ndarray, delay: int, system: Any) -> np.ndarray:
    """The input applied now: the filter output of ``delay`` periods ago (neutral before)."""
    outputs.append(u.copy())              # (a filter may reuse its output buffer)
    if len(outputs) > delay:
        return outputs.pop(0)
    return np.tile(neutral_input(system), (len(u), 1))


def _initial_findings(system: Any, barrier: Barrier | None, filter: Any, X: np.ndarray, order: int) -> list:
    """Where the initial states lie: the constraint set, and the filter's invariant set."""
    constraint = system.constraint(X)
    if barrier is None:
        return initial_state_findings(constraint, None)
    terms = barrier_terms(barrier, system, X, 1)
    alpha1 = getattr(filter, "alpha1", None) if order == 2 else None
    psi1 = None if alpha1 is None else np.asarray(terms.Lf) + alpha1(np.asarray(terms.h))
    return initial_state_findings(constraint, terms.h, psi1)


def _metadata(system: Any, barrier: Any, filter: Any, controller: Any, order: int, t_final: float,
              dt_control: float, dt_int: float, B: int, T: int, clock: dict, faults: list[dict],
              extra: dict | None) -> dict:
    return {
        "system": getattr(system, "name", type(system).__name__),
        "state_names": list(getattr(system, "state_names", [])),
        "input_names": list(getattr(system, "input_names", [])),
        "u_min": [float(v) for v in system.u_min], "u_max": [float(v) for v in system.u_max],
        "barrier": type(barrier).__name__ if barrier is not None else None,
        "filter": _describe_filter(filter),
        "controller": getattr(controller, "name", getattr(controller, "__name__", type(controller).__name__)),
        "order": order, "t_final": float(t_final), "dt_control": float(dt_control), "dt_int": dt_int,
        "batch_size": B, "steps": T,
        "timing": {**clock, "barrier_calls": T + 1 if barrier is not None else 0, "filter_calls": T if filter else 0},
        "faults": list(faults),
        **(extra or {}),
    }


def simulate(system: Any, barrier: Barrier | None, filter: SafetyFilter | None,
             controller: Callable[[np.ndarray], np.ndarray] | str, x0: Any, t_final: float,
             dt_control: float, dt_int: float | None = None, order: int | None = None,
             metadata: dict | None = None, on_fault: str = "stop", strict: bool = False,
             perturbation: Perturbation | None = None, run_seed: int | None = None) -> Trajectory:
    """One run from x0 (n,); returns a Trajectory with batch size 1 (see simulate_batch:
    a non-finite state stops the run and marks it, or raises with ``on_fault="raise"``;
    an x0 outside the constraint or certified set is warned about, or refused with ``strict``)."""
    x0 = np.asarray(x0, dtype=np.float64)
    if x0.shape != (system.n,):
        raise ShapeError(f"x0: expected shape ({system.n},), got {x0.shape}")
    return simulate_batch(system, barrier, filter, controller, x0[None, :], t_final, dt_control,
                          dt_int, order, metadata, on_fault, strict, perturbation,
                          None if run_seed is None else [run_seed])
