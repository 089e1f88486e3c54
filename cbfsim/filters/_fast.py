"""Single-state fast paths of the filters: float twins of the array code.

One state, one row, one input (B = k = m = 1) is what a single simulated trajectory of
most plants asks for, and numpy's per-call overhead there costs more than the arithmetic.
Each twin below makes the same floating-point operations, in the same order, as the array
code it stands for, and hands anything it does not cover (non-finite data, rows outside
the plain normalisation range, rows or nominal inputs the OSQP solver decides exactly,
unbounded boxes) back to the general path before it changes any state. So both paths
give identical bits; tests/test_filter_fast_paths.py checks that with np.array_equal
over random and edge cases, and CBFSIM_FAST_PATHS=0 switches every twin off (the same
switch turns off the plants' and the simulator's twins).

``filter_single`` is the one entry point (called by ``RowFilter.filter``).

numpy's elementwise rules, replicated on floats for non-NaN data: np.maximum / np.minimum
return the second argument on a tie; np.clip keeps x on a tie, except when x and both
bounds are arrays of one shape (its SIMD kernel then returns the bound); a sum or einsum
over one term is 0.0 + term. The sign of a zero never changes a value computed from it here.
"""
from __future__ import annotations

import math
import sys
import time
from typing import Any, Callable

import numpy as np

from ..barriers import LieTerms
from ..classk import Linear
from .base import NORM_RANGE, FilterResult, FilterStatus, fast_paths_enabled
from .cbf_qp import _SOLVED, DECIDE_OFFSET, QPRowSolver
from .projection import ProjectionRowSolver

_isfinite = math.isfinite
_F64 = np.dtype(np.float64)
_DBL_MAX = sys.float_info.max
_OK, _SLACK, _FALLBACK = FilterStatus.OK, FilterStatus.SLACK_ACTIVE, FilterStatus.FALLBACK


def max_np(x: float, y: float) -> float:
    """np.maximum(x, y) for non-NaN floats."""
    return x if x > y else y


def min_np(x: float, y: float) -> float:
    """np.minimum(x, y) for non-NaN floats."""
    return x if x < y else y


def clip_np(x: float, lo: float, hi: float) -> float:
    """np.clip(x, lo, hi), lo <= hi, for broadcast or scalar bounds (x kept on a tie)."""
    return lo if x < lo else (hi if x > hi else x)


def clip_same_np(x: float, lo: float, hi: float) -> float:
    """np.clip(x, lo, hi), lo <= hi, for x, lo, hi arrays of one shape (bound on a tie)."""
    w = x if x > lo else lo
    return w if w < hi else hi


def normalise_one(a: float, b: float) -> tuple[float, float] | None:
    """``base.normalise_rows`` for one row with one input, or None where it takes its
    rescaled branch (b != 0 with a norm outside NORM_RANGE, 0 included: b * b underflows)."""
    norm = math.sqrt(0.0 + b * b)
    if b != 0 and not (NORM_RANGE[0] <= norm <= NORM_RANGE[1]):
        return None
    scale = norm if norm > 0 else 1.0
    return a / scale, b / scale


def violation_one(a: float, b: float, u: float, an: float, bn: float) -> float:
    """``base.row_violation`` for one row with one input."""
    slack = max_np(0.0, -(a + (0.0 + b * u)))
    if _isfinite(slack):
        return slack
    return 0.0 if an + (0.0 + bn * u) >= 0 else math.inf


def result_one(u: float, slack: float, code: int, slack_tol: float, elapsed: float) -> FilterResult:
    """The FilterResult the row solvers build for one state (status from slack when solved)."""
    if code == _FALLBACK:
        slack = 0.0
    elif code == _OK:
        code = _SLACK if slack > slack_tol else _OK
    return FilterResult(u=np.array([[u]]), slack=np.array([slack]), status=np.array([code], dtype=np.int8),
                        solve_time=np.array([elapsed]))


# ----------------------------------------------------------------------------- OSQP

def accept_one(solver: QPRowSolver, a: float, b: float, u_nom: float, lam0: float) -> bool:
    """refine()'s first test for k = m = 1: is clip(lam0, 0, rho) already exact, i.e.
    kkt_residual <= 1e-10 * scale? The same operations as refine.py in the same order."""
    lo, hi, rho = solver.u_min.item(), solver.u_max.item(), solver.slack_penalty
    lam = clip_np(lam0, 0.0, rho)
    # max(initial=0.0) of one |value| and the sum over one term are that value
    scale = 1.0 + abs(a) + abs(b) * max(1.0, solver.bound_scale, abs(u_nom))
    u = clip_same_np(u_nom + (0.0 + b * lam), lo, hi)
    g = a + (0.0 + b * u)
    bb = 0.0 + b * b
    neg = min_np(max_np(0.0, -g), (rho - lam) * bb)
    pos = min_np(max_np(0.0, g), lam * bb)
    return max_np(0.0, max_np(neg, pos)) <= 1e-10 * scale


def qp_single(solver: QPRowSolver, a: float, b: float, u_nom: float) -> FilterResult | None:
    """``QPRowSolver.solve`` for B = k = m = 1: the hard phase loaded from floats and, in its
    common case (OSQP solved, refine()'s first test accepts), answered on floats;
    everything else continues in ``solver.finish`` exactly as the array path would."""
    if not (_isfinite(a) and _isfinite(b) and _isfinite(u_nom)) or abs(u_nom) > DECIDE_OFFSET:
        return None
    row = normalise_one(a, b)
    if row is None or not abs(row[0]) <= DECIDE_OFFSET:
        return None
    an, bn = row
    start = time.perf_counter()
    ws = solver.workspace(0)
    solver.stats["solves"] += 1
    q, lo, _ = solver.buffers("hard")
    q[0] = -u_nom
    lo[0] = -an
    solver.gains[solver.b_slots[0]] = bn
    hard = solver.solve_loaded(ws, "hard", None)
    x, y, status = hard
    u = None
    if status == _SOLVED and solver.refine and x is not None:
        x0, y0 = x.item(0), y.item(0)
        if _isfinite(x0) and _isfinite(y0) and accept_one(solver, an, bn, u_nom, -y0):
            solver.stats["hard"] += 1
            solver.stats["refined"] += 1
            lam = clip_np(-y0, 0.0, solver.slack_penalty)
            u, code = clip_same_np(u_nom + (0.0 + bn * lam), solver.u_min.item(), solver.u_max.item()), _OK
    if u is None:
        u_arr, code = solver.finish(0, np.array([an]), np.array([[bn]]), np.array([u_nom]), hard)
        u = u_arr.item()
    elapsed = time.perf_counter() - start
    return result_one(u, violation_one(a, b, u, an, bn), code, solver.slack_tol, elapsed)


# ----------------------------------------------------------------------------- projection

def project_one(a: float, b: float, u: float, lo: float, hi: float, rho: float) -> float:
    """``project_halfspace_box(...).u`` for B = m = 1, for finite a, b, u, bounds and rho.
    With finite rho the array code's best_u / g_inf only feed ``feasible`` and _root's
    non-finite breakpoints, which nan_to_num rules out, so they are not computed here."""
    pos, neg = b > 0, b < 0
    if pos:
        t1, t2 = (lo - u) / b, (hi - u) / b
    elif neg:
        t1, t2 = (hi - u) / b, (lo - u) / b
    else:
        t1 = t2 = 0.0
    t1, t2 = max_np(t1, 0.0), max_np(t2, 0.0)                       # .clip(min=0.0)
    t1 = _DBL_MAX if t1 == math.inf else t1                           # nan_to_num (t >= 0, not NaN)
    t2 = _DBL_MAX if t2 == math.inf else t2
    g0 = a + (0.0 + clip_np(u + 0.0 * b, lo, hi) * b)
    g_rho = a + (0.0 + clip_np(u + rho * b, lo, hi) * b)
    if g0 < 0 and g_rho <= 0:
        lam = rho
    elif g0 < 0:
        bp = (t1, t2) if not t2 < t1 else (t2, t1)                    # np.sort keeps ties in order
        g_bp = [a + (0.0 + clip_np(u + t * b, lo, hi) * b) for t in bp]
        k = 0 if g_bp[0] >= 0 else 1                                  # argmax(past), else the last
        start, g_start = (bp[0], g_bp[0]) if k > 0 else (0.0, a + (0.0 + clip_np(u + 0.0 * b, lo, hi) * b))
        slope = 0.0 + (b * b if (t1 <= start and start < t2 and b != 0) else 0.0)
        end = bp[k]
        lam = start - g_start / slope if slope > 0 else end
        lam = clip_same_np(lam, start, end)
    else:
        lam = 0.0
    return clip_np(u + lam * b, lo, hi)


def projection_single(solver: ProjectionRowSolver, a: float, b: float, u_nom: float) -> FilterResult | None:
    """``ProjectionRowSolver.solve`` for B = m = 1 on floats (finite data, bounds and rho)."""
    start = time.perf_counter()
    lo, hi, rho = solver.u_min.item(), solver.u_max.item(), solver.slack_penalty
    if not all(map(_isfinite, (a, b, u_nom, lo, hi, rho))):
        return None
    row = normalise_one(a, b)
    if row is None or not _isfinite(row[0]):
        return None
    an, bn = row
    u = project_one(an, bn, u_nom, lo, hi, rho)
    return result_one(u, violation_one(a, b, u, an, bn), _OK, solver.slack_tol, time.perf_counter() - start)


_TWINS: dict[type, Callable[[Any, float, float, float], FilterResult | None]] = {
    QPRowSolver: qp_single, ProjectionRowSolver: projection_single}


# ----------------------------------------------------------------------------- dispatch

def cbf_row_one(terms: Any, alpha: Any) -> tuple[float, float] | None:
    """``cbf_rows`` as floats for one LieTerms of one float64 state with one input and a
    Linear alpha (a = L_f h + gain * h, the same two operations); None for anything else."""
    if type(alpha) is not Linear or not isinstance(terms, LieTerms):
        return None
    h, Lf, Lg = terms.h, terms.Lf, terms.Lg
    if not (type(h) is type(Lf) is type(Lg) is np.ndarray and h.shape == Lf.shape == (1,) and Lg.shape == (1, 1)
            and h.dtype == Lf.dtype == Lg.dtype == _F64):
        return None
    return Lf.item() + alpha.gain * h.item(), Lg.item()


def filter_single(filt: Any, x: np.ndarray, u_nom: np.ndarray, terms: Any) -> FilterResult | None:
    """``RowFilter.filter`` before its fault policy, for u_nom (1, 1); None: use the general path."""
    if not fast_paths_enabled():
        return None
    twin = _TWINS.get(type(filt.solver))
    if twin is None:
        return None
    row = cbf_row_one(terms, filt.alphas[0]) if filt.order == 1 and filt.n_barriers == 1 else None
    if row is None:
        a, b = filt.rows(terms, u_nom)
        if a.shape != (1, 1) or b.shape != (1, 1, 1):
            return None
        row = a.item(), b.item()
    margin = filt.margin_at(x)
    return twin(filt.solver, row[0] - (margin if type(margin) is float else margin.item()), row[1], u_nom.item())
