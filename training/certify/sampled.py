"""Sampled data: the zero-order-hold loop keeps the set over a whole control period.

For a box B of sampled states x_k and the one-period tube R (every x(t), t in [0, T],
from x_k in B under any held input in U), the filter returns some u in

    U_adm(B) = {u in U : a~ . u + b~ >= eps for some a~, b~ in the float32 enclosures over B}

(the filter sees the header's float32 numbers at x_k).  If

    min over u in U_adm(B), x in R of a(x) . u + b(x) >= 0          (float64 enclosures over R)

with (a, b) the constraint row (order 1: L_G h, L_f h + gamma h; order 2: L_G L_f h,
L_f^2 h + alpha1 L_f h + alpha2 psi1), then d/dt h >= -gamma h (order 2: d/dt psi1 >=
-alpha2 psi1, and d/dt h = psi1 - alpha1 h) along the whole period, and the comparison
lemma keeps h (and psi1) >= 0.  For a ReLU network the interval gradient over R encloses
the Clarke gradient, so the bound holds almost everywhere along the trajectory.

A second, less conservative route bounds the level itself instead of its rate (``level_drop``):
with l = h, q = L_f h, a = L_G h, k = gamma (order 2: l = psi1, q = L_f^2 h + alpha1 L_f h,
a = L_G L_f h, k = alpha2; L_G h = 0 is proven separately), the filter's computed row gives
q~ + a~.u + k l~ >= eps - tau at x_k (tau: its own float32 rounding), and along the period
d/dt l(x(s)) = q(x(s)) + a(x(s)).u lies in the float64 enclosure E64(u) over the tube, while
(q~, a~, l~) lie in the float32 enclosure E32 over the box. Hence

    l(x(t)) >= l(x_k) + t (eps - tau - D - k l~_hi),   D = max_u (sup E32(u) - inf E64(u)),

and l stays >= 0 over [0, T] when  l_lo+ / T + min(0, eps - tau - D - k l~_hi) >= 0.  The
rate route needs a(x).u + b(x) >= 0 over the whole tube, whose enclosure carries k times the
variation of l over the tube (alpha2 = 40 for the pendulum); this one does not.  Order 2:
psi1 >= 0 over the period gives d/dt h = psi1 - alpha1 h >= -alpha1 h, so h stays >= 0.

Smooth order 1 has a third route (``taylor_level``), second order in time: with
h(x(t)) >= h(x_k) + t d/dt h(x_k, u) + t^2/2 min over the tube of d2/dt2 h, and the filter's
float32 numbers within the header's rounding bounds e (``compiler.bounds.Rounding``: grad h
per unit seed, h) of the real ones, d/dt h(x_k, u) >= eps - tau - e_1 - gamma (h(x_k) + e_h)
with e_1 = sum_i e_grad,i |F_i| + 2^-23 sum_i |grad h_i| |F_i| (F = f + G u; the second sum:
the seeds' own rounding to float32).  The bound is concave in t, smallest at t = 0 or t = T,
so for gamma T <= 1 h stays >= 0 over the period when
h_lo+ (1 - gamma T) / T + eps - tau - e_1 - gamma e_h + T/2 min(0, d2/dt2 h_lo) >= 0.
It needs half the margin of the rate route, none of its gamma d/dt h term, and no share of the
box's width: only the tube's curvature and the header's rounding.

The minimum over U_adm(B) is exact and vectorised: in each orthant of u (sign pattern)
both the admissibility constraint and the objective are linear in u, so the minimum of a
linear function over box-and-half-space is at a vertex: a box corner that satisfies the
constraint, or the half-space's crossing of a box edge (m <= 3 here).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from compiler.interval import Interval

ADMISSIBLE_RTOL = 1e-12   # the admissible half-space is relaxed by this (a superset: sound)


@dataclass
class WorstInput:
    value: np.ndarray      # (B,) lower bound of min a(x).u + b(x); -inf where U_adm is empty
    u: np.ndarray          # (B, m) the minimising vertex (a counterexample candidate)


def min_over_admissible(adm_a: Interval, adm_b_hi: np.ndarray, eps: float | np.ndarray, obj_a: Interval,
                        obj_b_lo: np.ndarray, u_lo: np.ndarray, u_hi: np.ndarray) -> WorstInput:
    """Lower bound of min { a.u + b : a in obj_a, b >= obj_b_lo, u in U,
    sup_{a~ in adm_a} a~.u + adm_b_hi >= eps } per box (see the module docstring)."""
    batch, m = adm_a.shape
    best = np.full(batch, np.inf)
    best_u = np.tile(0.5 * (u_lo + u_hi), (batch, 1))
    for signs in itertools.product((1.0, -1.0), repeat=m):
        s = np.array(signs)
        lo = np.where(s > 0, np.maximum(u_lo, 0.0), u_lo)
        hi = np.where(s > 0, u_hi, np.minimum(u_hi, 0.0))
        if np.any(lo > hi):
            continue                                   # the orthant misses the input box
        p = np.where(s > 0, adm_a.hi, adm_a.lo)        # sup of a~_j u_j in this orthant
        q = np.where(s > 0, obj_a.lo, obj_a.hi)        # inf of a_j u_j in this orthant
        need = eps - adm_b_hi                          # p . u >= need
        for u in _vertices(p, need, lo, hi):
            pu = (p * u).sum(-1)
            tol = ADMISSIBLE_RTOL * (1.0 + np.abs(p * u).sum(-1) + np.abs(need))
            ok = pu >= need - tol
            value = (q * u).sum(-1)
            value = value - 4 * m * np.finfo(float).eps * np.abs(q * u).sum(-1) - 1e-300
            better = ok & (value < best)
            best = np.where(better, value, best)
            best_u = np.where(better[:, None], u, best_u)
    with np.errstate(invalid="ignore"):
        total = np.where(np.isfinite(best), best + obj_b_lo, -np.inf)
    total = np.where(np.isnan(total), -np.inf, total)
    return WorstInput(np.nextafter(total, -np.inf), best_u)


def _vertices(p: np.ndarray, need: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """Candidate vertices (B, m) of {u in [lo, hi] : p . u >= need}: the box corners and the
    crossings of the plane p . u = need with the box edges (clipped; infeasible ones are
    filtered by the caller)."""
    batch, m = p.shape
    for corner in itertools.product((0, 1), repeat=m):
        yield np.tile(np.where(np.array(corner) == 0, lo, hi), (batch, 1))
    for j in range(m):
        others = [k for k in range(m) if k != j]
        for corner in itertools.product((0, 1), repeat=m - 1):
            u = np.tile(np.where(np.array([0] * m) == 0, lo, hi), (batch, 1))
            for k, c in zip(others, corner):
                u[:, k] = hi[k] if c else lo[k]
            rest = (p[:, others] * u[:, others]).sum(-1) if others else 0.0
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                uj = (need - rest) / p[:, j]
            uj = np.where(np.isfinite(uj), uj, lo[j])
            u[:, j] = np.clip(uj, lo[j], hi[j])
            yield u


@dataclass
class Tube:
    R: Interval            # (B, n)
    ok: np.ndarray         # (B,) bool: False where the enclosure did not close (split the box)


def tube(plant, box: Interval, u_lo: np.ndarray, u_hi: np.ndarray, T: float) -> Tube:
    """One-period reachable tube (``training.reach.one_period_tube``: every x(t), t in [0, T],
    from the box under any input in U); the box itself when T = 0."""
    if T == 0.0:
        return Tube(box, np.ones(box.shape[0], dtype=bool))
    from training.reach import one_period_tube
    t = one_period_tube(plant, box, Interval(np.asarray(u_lo, float), np.asarray(u_hi, float)), T)
    return Tube(t.R, np.asarray(t.ok, dtype=bool))


def admissible_slices(a32: Interval, b32_hi: np.ndarray, eps: float | np.ndarray, tau: np.ndarray,
                      u_lo: np.ndarray, u_hi: np.ndarray, pieces: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The input box cut into ``pieces`` slices along the input whose row gain spans the most,
    each with the boxes (B,) where the filter may return an input in it: some u in the slice
    has sup over the float32 enclosures of a~ . u + b~ >= eps - tau (its own rounding).  A
    slice no admissible input reaches cannot be held, so the curvature over it does not count."""
    if len(u_lo) == 0:             # no inputs (m = 0): one empty slice, held wherever the row holds
        slack = ADMISSIBLE_RTOL * (1.0 + np.abs(b32_hi) + np.abs(eps)) + tau
        return [(np.array(u_lo, float), np.array(u_hi, float), ~(b32_hi < eps - slack))]
    mag = np.maximum(np.abs(a32.lo), np.abs(a32.hi)) * (u_hi - u_lo)
    j = int(np.argmax(np.nan_to_num(np.median(mag, axis=0), nan=0.0)))
    edges = np.linspace(u_lo[j], u_hi[j], pieces + 1)
    out = []
    for k in range(pieces):
        lo, hi = np.array(u_lo, float), np.array(u_hi, float)
        lo[j], hi[j] = edges[k], edges[k + 1]
        if k == pieces - 1:
            hi[j] = u_hi[j]
        corners = np.maximum(np.maximum(a32.lo * lo, a32.lo * hi), np.maximum(a32.hi * lo, a32.hi * hi)).sum(-1)
        reach = corners + b32_hi
        slack = ADMISSIBLE_RTOL * (1.0 + np.abs(corners) + np.abs(b32_hi) + np.abs(eps)) + tau
        out.append((lo, hi, ~(reach < eps - slack)))      # NaN -> possible (sound)
    return out


FILTER_ROUNDING = 2.0 ** -20   # the filter's float32 row and projection: 16 ulps of the magnitudes


def row_rounding(level32: Interval, q32: Interval, a32: Interval, gain: float, eps: float | np.ndarray,
                  u_lo: np.ndarray, u_hi: np.ndarray) -> np.ndarray:
    """tau: how far below eps the filter's float32 row at its returned input may be."""
    mag = lambda iv: np.maximum(np.abs(iv.lo), np.abs(iv.hi))      # noqa: E731
    size = mag(q32) + gain * mag(level32) + (mag(a32) * np.maximum(np.abs(u_lo), np.abs(u_hi))).sum(-1)
    return FILTER_ROUNDING * (size + np.abs(eps))


def _finish(credit: np.ndarray, rate: np.ndarray, parts: np.ndarray) -> np.ndarray:
    """credit + min(0, rate), rounded down (``parts``: the magnitudes summed into the rate);
    exactly 0 where the credit is 0 and the rate is safely >= 0 (the level cannot drop)."""
    with np.errstate(invalid="ignore"):
        rate = rate - 8 * np.finfo(float).eps * parts
        score = np.nextafter(credit, -np.inf).clip(min=0.0) + np.minimum(rate, 0.0)
        score = np.where((score == 0) & (rate >= 0), 0.0, np.nextafter(score, -np.inf))
    return np.where(np.isnan(score), -np.inf, score)


def _per_period(level: np.ndarray, T: float) -> np.ndarray:
    """level / T, and its limit for continuous time (T = 0): +inf where the level is > 0 (no
    period to cross it in), 0 on the boundary (only the rate counts there) -- never 0/0."""
    if T > 0:
        return level / T
    return np.where(level > 0, np.inf, 0.0)


def level_drop(level32: Interval, q32: Interval, a32: Interval, q64: Interval, a64: Interval, gain: float,
               eps: float | np.ndarray, T: float, u_lo: np.ndarray, u_hi: np.ndarray,
               level_error: np.ndarray | None = None) -> np.ndarray:
    """Lower bound of  min over x_k in the box (in the set) and t in [0, T] of l(x(t)) / T
    (see the module docstring; >= 0 proves the level stays >= 0 over the period).

    ``level_error`` (B,): a bound on |l~(x_k) - l(x_k)|, the filter's float32 level against the
    real one at the same state.  Then, for gain T <= 1, a second bound that charges the class-K
    term per state instead of at the box's highest level: the row gives d/dt l >= eps - tau - D
    - gain (l(x_k) + e) along the period, so l(x(t)) >= l(x_k)(1 - gain t) + t (eps - tau - D -
    gain e), least at t = T and at the box's lowest level in the set.  On a box straddling the
    set's edge this drops gain * l~_hi (the pendulum: 40 x 0.03 = 1.3, its whole margin)."""
    batch, m = a32.shape
    drift = np.zeros(batch)
    for corner in itertools.product((0, 1), repeat=m):    # sup E32 - inf E64 is convex in u: a vertex
        u = np.where(np.array(corner) == 0, u_lo, u_hi).astype(float)
        drift = np.maximum(drift, ((q32 + (a32 * u).sum(-1)) - (q64 + (a64 * u).sum(-1))).hi)
    tau = row_rounding(level32, q32, a32, gain, eps, u_lo, u_hi)
    rate = eps - tau - drift - gain * level32.hi
    floor = np.maximum(level32.lo, 0.0)
    score = _finish(_per_period(floor, T), rate, np.abs(eps) + tau + drift + gain * np.abs(level32.hi))
    if level_error is None or gain * T > 1.0:
        return score
    error = level_error * (1 + 1e-12)
    rate = eps - tau - drift - gain * error
    credit = _per_period(floor * (1.0 - gain * T), T)
    return np.maximum(score, _finish(credit, rate, np.abs(eps) + tau + drift + gain * error))


def taylor_level(h32: Interval, lf32: Interval, lg32: Interval, grad32: Interval, rounding, idx: np.ndarray,
                 F: Interval, second_lo: np.ndarray, gamma: float, eps: float | np.ndarray, T: float, u_lo: np.ndarray,
                 u_hi: np.ndarray, rate_at_start: np.ndarray | None = None) -> np.ndarray:
    """Lower bound of  min over x_k in the box (in the set) and t in [0, T] of h(x(t)) / T,
    second order in time (see the module docstring; smooth order 1); -inf without the
    header's rounding bounds or when gamma T > 1.  ``second_lo``: d2/dt2 h over the tube for
    the held inputs in question; ``rate_at_start``: a lower bound of the real d/dt h(x_k, u)
    for those inputs, a second route to the same bound beside the filter's row (the larger
    counts): h(x(T)) >= h(x_k) + T rate + T^2/2 min(0, second), concave in t."""
    direct = np.full(len(h32.lo), -np.inf)
    if rate_at_start is not None and T > 0:
        curve = 0.5 * T * np.minimum(second_lo, 0.0)
        credit = np.maximum(h32.lo, 0.0) / T
        direct = _finish(credit, rate_at_start + curve, np.abs(rate_at_start) - curve)
    if rounding is None or rounding.grad is None or gamma * T > 1.0:
        return direct
    mag = lambda iv: np.maximum(np.abs(iv.lo), np.abs(iv.hi))      # noqa: E731
    Fmag = mag(F)
    e1 = (rounding.grad[idx] * Fmag).sum(-1) + 2.0 ** -23 * (mag(grad32) * Fmag).sum(-1)
    e1 = e1 * (1 + 1e-12) + gamma * rounding.h[idx]
    tau = row_rounding(h32, lf32, lg32, gamma, eps, u_lo, u_hi)
    curve = 0.5 * T * np.minimum(second_lo, 0.0)
    rate = eps - tau - e1 + curve
    credit = _per_period(np.maximum(h32.lo, 0.0) * (1.0 - gamma * T), T)
    return np.maximum(direct, _finish(credit, rate, np.abs(eps) + tau + e1 - curve))
