"""Exact, vectorised solution of the single-row filter problem (no iterative solver).

Problem P_rho (the same one ``CBFQP`` hands to OSQP, see cbf_qp.py; both row solvers
first scale the row to ||b|| = 1 with ``base.normalise_rows``):

    min_{u, s}  1/2 ||u - u_nom||^2 + rho * s
    s.t.        a + b.u + s >= 0,   s >= 0,   u_min <= u <= u_max.

KKT (convex, so necessary and sufficient): with multiplier lam in [0, rho] of the row,
u(lam) = clip(u_nom + lam b, u_min, u_max), and g(lam) = a + b.u(lam) is continuous,
nondecreasing and piecewise linear with slope sum_{j moving} b_j^2. Then
  * g(0) >= 0:              lam = 0, u = clip(u_nom)            (nominal already safe)
  * g(lam*) = 0, lam* <= rho: the root, found exactly by sorting the breakpoints
                            (u_j hits a bound) and solving on the bracketing segment
  * otherwise (g(rho) < 0): lam = rho, s = -g(rho) > 0          (row relaxed)
For rho = +inf the last case is the lexicographic least-violation input: maximise
a + b.u over the box (u_j = u_max_j if b_j > 0, u_min_j if b_j < 0), and among those the
one closest to u_nom (u_j = clip(u_nom_j) where b_j = 0); it is the rho -> inf limit.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..barriers import ShapeError, check_shape
from .base import (DEFAULT_SLACK_TOL, FilterResult, FilterStatus, check_penalty, input_bounds, nominal_batch,
                   normalise_rows, placeholder_input, row_violation, status_from_slack)


@dataclass(frozen=True)
class Projection:
    """u (B, m); slack (B,) = max(0, -(a + b.u)); lam (B,) row multiplier (inf when
    rho = inf and infeasible); feasible (B,) whether some box input satisfies the row."""

    u: np.ndarray
    slack: np.ndarray
    lam: np.ndarray
    feasible: np.ndarray


def _g(a: np.ndarray, b: np.ndarray, u_nom: np.ndarray, lo: np.ndarray, hi: np.ndarray,
       lam: np.ndarray) -> np.ndarray:
    """g at multipliers lam (B, K) -> (B, K); lam must be finite."""
    u = np.clip(u_nom[:, None, :] + lam[:, :, None] * b[:, None, :], lo, hi)
    return a[:, None] + np.einsum("bkm,bm->bk", u, b)


def project_halfspace_box(a: Any, b: Any, u_nom: Any, u_min: Any, u_max: Any,
                          slack_penalty: float = np.inf) -> Projection:
    """Solve P_rho exactly for a batch: a (B,), b (B, m), u_nom (B, m), bounds (m,).

    Runs in O(B m^2) numpy work with no loop over the batch. ``slack_penalty`` = rho;
    the default +inf gives the least-violation input whenever the row is infeasible.
    """
    rho = check_penalty(slack_penalty)
    u_nom = nominal_batch(u_nom, np.size(u_min))
    B, m = u_nom.shape
    a = check_shape(a, (B,), "a")
    b = check_shape(b, (B, m), "b")
    lo, hi = input_bounds((u_min, u_max))
    if lo.shape != (m,):
        raise ShapeError(f"bounds: expected shape ({m},), got {lo.shape}")

    pos, neg = b > 0, b < 0
    # best value of the row over the box (inf when an unbounded coordinate helps)
    best_u = np.where(pos, hi, np.where(neg, lo, np.clip(u_nom, lo, hi)))
    with np.errstate(invalid="ignore"):
        g_inf = a + np.where(b != 0, b * best_u, 0.0).sum(axis=1)
    feasible = g_inf >= 0

    # breakpoints: coordinate j moves with lam on (t1_j, t2_j), both clamped at >= 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):   # t = inf for a tiny b_j
        t_lo = (lo - u_nom) / b
        t_hi = (hi - u_nom) / b
    t1 = np.where(pos, t_lo, np.where(neg, t_hi, 0.0)).clip(min=0.0)
    t2 = np.where(pos, t_hi, np.where(neg, t_lo, 0.0)).clip(min=0.0)
    t1 = np.nan_to_num(t1, nan=0.0)
    t2 = np.nan_to_num(t2, nan=0.0)

    g0 = _g(a, b, u_nom, lo, hi, np.zeros((B, 1)))[:, 0]
    lam = np.zeros(B)
    if np.isfinite(rho):
        g_rho = _g(a, b, u_nom, lo, hi, np.full((B, 1), rho))[:, 0]
        capped = (g0 < 0) & (g_rho <= 0)
    else:
        capped = (g0 < 0) & ~feasible
    lam[capped] = rho
    search = (g0 < 0) & ~capped

    if search.any():
        idx = np.flatnonzero(search)
        lam[idx] = _root(a[idx], b[idx], u_nom[idx], lo, hi, t1[idx], t2[idx], g_inf[idx])

    if np.isfinite(rho):
        u = np.clip(u_nom + lam[:, None] * b, lo, hi)
    else:
        u = np.where(capped[:, None], best_u, np.clip(u_nom + np.where(capped, 0.0, lam)[:, None] * b, lo, hi))
    slack = np.maximum(0.0, -(a + np.einsum("bm,bm->b", b, u)))
    return Projection(u=u, slack=slack, lam=lam, feasible=feasible)


def _root(a, b, u_nom, lo, hi, t1, t2, g_inf) -> np.ndarray:
    """Smallest lam >= 0 with g(lam) = 0, for rows with g(0) < 0 <= g(+inf)."""
    R = a.shape[0]
    bp = np.sort(np.concatenate([t1, t2], axis=1), axis=1)          # (R, 2m), may hold inf
    finite = np.isfinite(bp)
    g_bp = np.where(finite, _g(a, b, u_nom, lo, hi, np.where(finite, bp, 0.0)), g_inf[:, None])
    past = g_bp >= 0
    # first breakpoint past the root; at the last one every coordinate sits on a bound, so
    # g there equals g(inf) >= 0 up to rounding: fall back to it if rounding hid the sign
    k = np.where(past.any(axis=1), np.argmax(past, axis=1), bp.shape[1] - 1)
    start = np.where(k > 0, bp[np.arange(R), np.maximum(k - 1, 0)], 0.0)
    g_start = np.where(k > 0, g_bp[np.arange(R), np.maximum(k - 1, 0)],
                       _g(a, b, u_nom, lo, hi, np.zeros((R, 1)))[:, 0])
    moving = (t1 <= start[:, None]) & (start[:, None] < t2) & (b != 0)
    slope = np.where(moving, b * b, 0.0).sum(axis=1)                  # > 0 on the bracketing segment
    end = bp[np.arange(R), k]
    lam = np.where(slope > 0, start - g_start / np.where(slope > 0, slope, 1.0), end)
    return np.clip(lam, start, end)


class ProjectionRowSolver:
    """Closed-form ``RowSolver`` for one row (k = 1): P_rho on the normalised row, exactly
    the problem ``QPRowSolver`` hands to OSQP; slack is the violation of the row as given."""

    n_rows = 1

    def __init__(self, u_min: Any, u_max: Any, slack_penalty: float = 1e6,
                 slack_tol: float = DEFAULT_SLACK_TOL):
        self.u_min, self.u_max = input_bounds((u_min, u_max))
        self.m = self.u_min.shape[0]
        self.slack_penalty = check_penalty(slack_penalty)
        self.slack_tol = float(slack_tol)
        with np.errstate(invalid="ignore"):
            self._extent = np.maximum(np.abs(self.u_min), np.abs(self.u_max))

    def reset(self) -> None:
        """Stateless: nothing to reset."""

    def solve(self, a: np.ndarray, b: np.ndarray, u_nom: np.ndarray) -> FilterResult:
        start = time.perf_counter()
        u_nom = nominal_batch(u_nom, self.m)
        B = u_nom.shape[0]
        a = check_shape(a, (B, 1), "row offsets a")[:, 0]
        b = check_shape(b, (B, 1, self.m), "row gains b")[:, 0, :]
        ok = np.isfinite(a) & np.isfinite(b).all(axis=1) & np.isfinite(u_nom).all(axis=1)
        every = bool(ok.all())
        u = np.clip(u_nom, self.u_min, self.u_max) if every else placeholder_input(u_nom, self.u_min, self.u_max)
        slack = np.zeros(B)
        status = np.full(B, FilterStatus.FALLBACK, dtype=np.int8)
        with np.errstate(invalid="ignore", over="ignore"):
            an, bn = normalise_rows((a if every else np.where(ok, a, 0.0))[:, None],
                                    (b if every else np.where(ok[:, None], b, 0.0))[:, None, :])
            if not np.isfinite(an).all():
                # a row that overflowed to +-inf is decided by the box, unless the box is
                # unbounded along it (then no finite answer exists to compare with): fault
                reach = np.where(bn[:, 0] != 0, np.abs(bn[:, 0]) * self._extent, 0.0).sum(axis=1)
                ok &= np.isfinite(an[:, 0]) | np.isfinite(reach)
        if ok.any():
            sel = slice(None) if ok.all() else ok       # (a view when every row is solved)
            p = project_halfspace_box(an[sel, 0], bn[sel, 0], u_nom[sel], self.u_min, self.u_max, self.slack_penalty)
            u[sel] = p.u
            slack[sel] = row_violation(a[sel][:, None], b[sel][:, None, :], p.u, an[sel], bn[sel])
            status[sel] = status_from_slack(slack[sel], self.slack_tol)
        elapsed = time.perf_counter() - start
        return FilterResult(u=u, slack=slack, status=status, solve_time=np.full(B, elapsed / max(B, 1)))
