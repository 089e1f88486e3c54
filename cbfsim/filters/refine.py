"""Exact KKT refinement ("polish") of an approximate solution of the filter problem P_rho.

OSQP (ADMM) reaches ~1e-4..1e-8 on P_rho but stalls when a multiplier is large (rho on a
relaxed row, or |u - u_nom| / |b_j| with a small gain b_j), and its own polish is
regularised by delta * |y|, which fails for such multipliers. P_rho is tiny, so we finish
it exactly: its dual is  max_{0 <= lam <= rho} d(lam)  with
    u(lam) = clip(u_nom + B^T lam, u_min, u_max),   g(lam) = a + B u(lam) = -grad d(lam),
and optimality is, row by row:  lam_i = 0 & g_i >= 0,  or  lam_i = rho & g_i <= 0,
or  0 < lam_i < rho & g_i = 0  (s_i = max(0, -g_i) is then the optimal slack).
Active sets are guessed first from OSQP's primal-dual pair (as OSQP's polish does, but
solved without regularisation), then from the primal alone at a few gap tolerances, then
by a primal-dual active-set (semismooth Newton) iteration on the dual; each candidate is
accepted only if it satisfies these conditions to ~1e-10 relative to the data, so an
accepted answer is exact whatever produced the guess.
"""
from __future__ import annotations

import itertools

import numpy as np


def kkt_residual(a: np.ndarray, B: np.ndarray, u_nom: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 rho: float, lam: np.ndarray) -> float:
    """Largest violation of the row-wise optimality conditions at ``lam`` in [0, rho]
    (u = clip(u_nom + B^T lam) makes the box conditions hold by construction). In units
    of g: g_i < 0 needs lam_i = rho, g_i > 0 needs lam_i = 0; a multiplier gap is
    converted to g-units by ||b_i||^2 (the rate g_i moves with lam_i)."""
    u = np.clip(u_nom + B.T @ lam, lo, hi)
    g = a + B @ u
    bb = (B * B).sum(axis=1)
    neg = np.minimum(np.maximum(0.0, -g), (rho - lam) * bb) if np.isfinite(rho) else np.maximum(0.0, -g)
    pos = np.minimum(np.maximum(0.0, g), lam * bb)
    return float(np.maximum(neg, pos).max(initial=0.0))


def _guess_sets(a, B, u_nom, lo, hi, rho, u, lam):
    """OSQP-polish-style active sets from an approximate primal-dual pair (u, lam): a bound
    or row is active when its gap is smaller than its multiplier (both in the same units)."""
    w = u_nom + B.T @ lam
    at_lo = (u - lo) < (lo - w)
    at_hi = (hi - u) < (w - hi)
    g = a + B @ u
    bb = (B * B).sum(axis=1)
    full = -g > (rho - lam) * bb          # relaxed row: slack larger than the multiplier gap
    zero = ~full & (g > lam * bb)         # inactive row: margin larger than the multiplier
    return zero, full, ~(at_lo | at_hi), np.where(at_lo, lo, hi)


def _primal_sets(a, B, lo, hi, u, gap):
    """Active sets from the primal alone (when the multipliers are unreliable): bounds
    within ``gap`` (relative) of u are active, rows with |g| <= gap scale are tight."""
    span = gap * (1.0 + np.abs(np.where(np.isfinite(lo), lo, 0.0)) + np.abs(np.where(np.isfinite(hi), hi, 0.0)))
    at_lo = u - lo <= span
    at_hi = ~at_lo & (hi - u <= span)
    g = a + B @ u
    tight = gap * (1.0 + np.abs(a) + np.abs(B) @ np.abs(u))
    return g > tight, g < -tight, ~(at_lo | at_hi), np.where(at_lo, lo, hi)


def _solve_sets(a, B, u_nom, rho, zero, full, free_u, u_fixed):
    """Multipliers that make every non-fixed row tight for the given active sets
    (coordinates outside ``free_u`` held at ``u_fixed``)."""
    free_rows = ~(zero | full)
    lam = np.where(full, rho, 0.0)
    if free_rows.any():
        u_bound = np.where(free_u, 0.0, u_fixed)
        BE = B[free_rows]
        BEF = BE[:, free_u]
        shift = u_nom[free_u] + B[full][:, free_u].T @ np.full(int(full.sum()), rho)
        rhs = -(a[free_rows] + BE @ u_bound + BEF @ shift)
        lam[free_rows] = np.linalg.lstsq(BEF @ BEF.T, rhs, rcond=None)[0] if BEF.size else 0.0
    return lam


def refine(a: np.ndarray, B: np.ndarray, u_nom: np.ndarray, lo: np.ndarray, hi: np.ndarray,
           rho: float, lam0: np.ndarray, tol: float = 1e-10, max_iter: int = 50,
           u0: np.ndarray | None = None) -> np.ndarray | None:
    """Exact multipliers of P_rho near ``lam0`` (k,), or None if the active-set iteration
    does not reach a point satisfying the KKT conditions to ``tol`` (relative to the data).
    With an approximate primal ``u0`` the first active sets come from the pair (u0, lam0)."""
    bounds = np.abs(np.concatenate([lo, hi]))
    scale = 1.0 + np.abs(a).max(initial=0.0) + np.abs(B).sum(axis=1).max(initial=0.0) * \
        max(1.0, bounds[np.isfinite(bounds)].max(initial=0.0), np.abs(u_nom).max(initial=0.0))
    c = 1.0 / np.maximum((B * B).sum(axis=1), 1e-300)                  # PDAS step per row
    lam = np.clip(np.asarray(lam0, dtype=np.float64), 0.0, rho)
    if u0 is not None:
        u0 = np.clip(u0, lo, hi)
        if kkt_residual(a, B, u_nom, lo, hi, rho, lam) <= tol * scale:
            return lam                              # already exact (OSQP's polish worked)
        guesses = itertools.chain([_guess_sets(a, B, u_nom, lo, hi, rho, u0, lam)],
                                  (_primal_sets(a, B, lo, hi, u0, gap) for gap in (1e-8, 1e-6, 1e-4, 1e-2)))
        for zero, full, free_u, u_fixed in guesses:
            trial = np.clip(_solve_sets(a, B, u_nom, rho, zero, full, free_u, u_fixed), 0.0, rho)
            if kkt_residual(a, B, u_nom, lo, hi, rho, trial) <= tol * scale:
                return trial
    previous = None
    for _ in range(max_iter):
        w = u_nom + B.T @ lam
        u = np.clip(w, lo, hi)
        z = lam - c * (a + B @ u)
        zero, full = z <= 0.0, z >= rho
        free_u = (w > lo) & (w < hi)
        sets = np.r_[zero, full, free_u]
        if previous is not None and np.array_equal(sets, previous):
            break                                   # active sets settled: lam solves them
        previous = sets
        lam = _solve_sets(a, B, u_nom, rho, zero, full, free_u, u)
    lam = np.clip(lam, 0.0, rho)
    return lam if kkt_residual(a, B, u_nom, lo, hi, rho, lam) <= tol * scale else None
