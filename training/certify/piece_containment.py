"""Containment of a ReLU network piece by piece (h < 0 wherever the constraint c fails).

Why: the back substitution's upper plane of h (``containment.py``) relaxes every unstable
neuron over the whole box, so a box that holds both the keep-out ball's rim and the set's edge
fails unless the two are further apart than that relaxation's slack; on the trained 3 x 8
spacecraft student 21,157 of the search's 23,419 failing boxes failed containment.  On each
piece S of the box (``compiler.bounds_pieces``, widened by the float32 header's error, so the
header's own pattern at every state is one of them) h is exactly g . x + c, and the states where
S applies satisfy its region's cuts.  Every state of the box where c < 0 also satisfies linear
rows a . d + b >= 0 (d = x - x_c, ``_constraint_rows``):

* the mean-value form, c(x) >= c_lo(x_c) + gmid . d - grad_rad . r (grad c's enclosure over the
  box: loose on a box wide along a direction c curves in, as a ball's grad 2z on z in [-1, 1]);
* tangent planes at Newton points x0 near {c = 0} (from the box's centre and from its least-c
  state), c(x) >= c(x0) + grad c(x0) . (x - x0) - Q, Q bounding the second-order term from the
  plant's Hessian enclosure over the hull of the box and x0 (0 for a ball).

The largest g . d over the piece's cuts and those rows is bounded by ``region_dual`` (weak
duality: any multipliers give a bound; +large where they prove the piece never meets c < 0 in
the box), so the box's score is

    min over pieces of  -(h_S(x_c) + eps + max g . d)    (> 0: proven),

eps: the header's rounding bound on h plus the piece's own float64 rounding.  A box with more
than ``MAX_UNSTABLE`` unstable neurons gets no score here (-inf).  On the 3 x 8 student the
mean-value row alone proved none of 30 failing boxes, the tangent rows 93% (scipy's LP on the
same rows: 97%), and its search fell from 25,504 to 4,787 boxes.
"""
from __future__ import annotations

import numpy as np

from compiler.bounds_pieces import pieces
from compiler.interval import Interval, gamma
from compiler.passes import canonicalize

from . import region_dual
from .level_pieces import CHUNK_BOXES, MAX_UNSTABLE
from .patterns import preactivation_enclosures
from .problem import Problem
from .terms import _entry

_UP = 1.0 + 2.0 ** -40
_U = 2.0 ** -53


def piece_containment(problem: Problem, box: Interval, max_unstable: int = MAX_UNSTABLE) -> np.ndarray:
    """(B,) containment score per box (module docstring): > 0 proves h < 0 wherever c < 0 in the box."""
    out = np.full(box.shape[0], -np.inf)
    if problem.plant.constraint_grad is None:
        return out
    model = canonicalize(problem.model)
    for start in range(0, box.shape[0], CHUNK_BOXES):
        rows = np.arange(start, min(start + CHUNK_BOXES, box.shape[0]))
        out[rows] = _chunk(problem, model, box[rows], max_unstable)
    return out


def _chunk(problem: Problem, model, box: Interval, max_unstable: int) -> np.ndarray:
    batch, n = box.shape
    enclosures, errors, e_h = preactivation_enclosures(model, box)
    found = pieces(model, box, max_unstable, widen=errors, clamp=enclosures, cuts=True)
    b = found.box_index
    centre, radius = _centre(box)
    xc, r = centre[b], radius[b]
    g = found.g
    h_c = np.einsum("pi,pi->p", g, xc) + found.c
    eps = ((gamma(n + 1) * (np.einsum("pi,pi->p", np.abs(g), np.abs(xc)) + np.abs(found.c))
            + found.c_err + np.einsum("pi,pi->p", found.g_err, np.abs(xc) + r) + e_h[b]) * _UP
           + 4 * _U * np.abs(h_c))
    reach = np.einsum("pi,pi->p", np.abs(g), r) * (1 + 4 * _U) * _UP
    top = np.nextafter(h_c + eps + reach + 4 * _U * (np.abs(h_c) + eps + reach), np.inf)     # h_S's top over the box
    score = np.where(top < 0, -top * (1 - 4 * _U), -np.inf)
    weak = np.flatnonzero(score < 0)
    if len(weak):
        a, rhs = region_dual.region_rows(found.cuts, xc, r)
        ball_a, ball_b = _constraint_rows(problem, box)
        # the constraint's rows first: coordinate ascent raises them before the cuts (93% of 30 failing boxes
        # of the spacecraft student proven against 73% the other way round; scipy's LP: 97%)
        a = np.concatenate([ball_a[b[weak]], a[weak]], axis=1)
        rhs = np.concatenate([ball_b[b[weak]], rhs[weak]], axis=1)
        zero = np.zeros(len(weak))
        args = (-g[weak], np.zeros_like(g[weak]), zero, zero, a, rhs, r[weak])
        least = region_dual.raised(*args, zero, h_c[weak] + eps[weak])        # <= min of -g . d
        with np.errstate(invalid="ignore", over="ignore"):
            worst = h_c[weak] + eps[weak] - least                                   # >= max h_S
            worst = np.nextafter(worst + 4 * _U * (np.abs(h_c[weak]) + eps[weak] + np.abs(least)), np.inf)
        score[weak] = np.where(np.isnan(worst), -np.inf, -worst)
    out = np.full(batch, np.inf)
    np.minimum.at(out, b, score)
    held = np.bincount(b, minlength=batch) > 0          # every state takes some pattern: none left claims nothing
    return np.where(found.enumerated & held, out, -np.inf)


def _constraint_rows(problem: Problem, box: Interval) -> tuple[np.ndarray, np.ndarray]:
    """(a (B, R, n), b (B, R)): every state of each box where c < 0 has a_k . (x - x_c) + b_k >= 0
    for each of R rows: the mean-value form about the box's centre and, where the plant bounds
    c's Hessian, the second-order form about a point x0 near {c = 0} (``_tangent_row``)."""
    rows = [_mean_value_row(problem, box)]
    if problem.plant.constraint_hess is not None:
        centre, _ = _centre(box)
        rows += [_tangent_row(problem, box, start) for start in (centre, _least_point(problem, box))]
    return np.stack([a for a, _ in rows], axis=1), np.stack([b for _, b in rows], axis=1)


def _mean_value_row(problem: Problem, box: Interval) -> tuple[np.ndarray, np.ndarray]:
    """c(x) >= c_lo(x_c) + gmid . d - grad_rad . r, grad c's enclosure over the box."""
    centre, radius = _centre(box)
    g_mid, g_rad = _mid_rad(_grad(problem, box))
    c_at = _value(problem, centre)
    with np.errstate(invalid="ignore", over="ignore"):
        spread = np.einsum("bi,bi->b", g_rad, radius) * _UP
        b = np.nextafter(spread - c_at.lo + 4 * _U * (spread + np.abs(c_at.lo)), np.inf)
    return -g_mid, np.where(np.isnan(b), np.inf, b)


def _least_point(problem: Problem, box: Interval, steps: int = 5) -> np.ndarray:
    """(B, n) a state of each box where c is low: projected gradient steps from the centre,
    of length 1 / (a Gershgorin bound of c's curvature over the box)."""
    batch, n = box.shape
    H = problem.plant.constraint_hess([box[:, i] for i in range(n)])
    curvature = np.max([sum(np.maximum(np.abs(_entry(H[i][j], batch).lo), np.abs(_entry(H[i][j], batch).hi))
                            for j in range(n)) for i in range(n)], axis=0)
    centre = _centre(box)[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(curvature > 0, 1.0 / curvature, 0.0)[:, None]
    x = centre
    for _ in range(steps):
        x = np.clip(x - rate * _mid_rad(_grad(problem, Interval.point(x)))[0], box.lo, box.hi)
    return np.where(np.isfinite(x), x, centre)


def _tangent_row(problem: Problem, box: Interval, start: np.ndarray, steps: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """c(x) >= c(x0) + grad c(x0) . (x - x0) - Q, Q bounding the second-order term from below
    by the Hessian's enclosure over the hull of the box and x0 (Q = 0 where c is convex with a
    diagonal Hessian, as a keep-out ball).  x0: Newton steps from ``start`` towards {c = 0}, so
    the row is the ball's tangent plane facing that state, which cuts far more than the
    mean-value form on a box wide in a direction c curves in."""
    batch, n = box.shape
    centre, _ = _centre(box)
    x0 = start.copy()
    for _ in range(steps):
        c0, g0 = _value(problem, x0).mid, _mid_rad(_grad(problem, Interval.point(x0)))[0]
        norm2 = np.einsum("bi,bi->b", g0, g0)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            step = np.where((norm2 > 0)[:, None], (c0 / np.where(norm2 > 0, norm2, 1.0))[:, None] * g0, 0.0)
        x0 = np.where(np.isfinite(step), x0 - step, x0)
    hull = Interval(np.minimum(box.lo, x0), np.maximum(box.hi, x0))
    reach = np.nextafter(np.maximum(np.abs(box.lo - x0), np.abs(box.hi - x0)), np.inf)     # >= |x - x0| on the box
    H = problem.plant.constraint_hess([hull[:, i] for i in range(n)])
    H_lo = np.stack([np.stack([_entry(H[i][j], batch).lo for j in range(n)], axis=1) for i in range(n)], axis=1)
    H_hi = np.stack([np.stack([_entry(H[i][j], batch).hi for j in range(n)], axis=1) for i in range(n)], axis=1)
    off = np.maximum(np.abs(H_lo), np.abs(H_hi)) * (1 - np.eye(n))
    curve = np.maximum(-np.einsum("bii->bi", H_lo), 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        Q = 0.5 * (np.einsum("bi,bi->b", curve, reach * reach) + np.einsum("bi,bij,bj->b", reach, off, reach))
        Q = Q * (1 + 4 * _U) * _UP
        g_mid, g_rad = _mid_rad(_grad(problem, Interval.point(x0)))
        c0 = _value(problem, x0).lo
        shift = centre - x0                                         # d = x - x_c, x - x0 = d + shift
        t = np.einsum("bi,bi->b", g_mid, shift)
        t_err = gamma(n + 2) * np.einsum("bi,bi->b", np.abs(g_mid), np.abs(shift))
        spread = (np.einsum("bi,bi->b", g_rad, reach) + Q + t_err) * _UP
        b = -c0 - t + spread
        b = np.nextafter(b + 4 * _U * (np.abs(c0) + np.abs(t) + spread), np.inf)
    return -g_mid, np.where(np.isnan(b), np.inf, b)


def _centre(box: Interval) -> tuple[np.ndarray, np.ndarray]:
    centre = np.clip(box.mid, box.lo, box.hi)
    return centre, np.nextafter(np.maximum(box.hi - centre, centre - box.lo), np.inf)


def _value(problem: Problem, x: np.ndarray) -> Interval:
    return _entry(problem.plant.constraint([Interval.point(x[:, i]) for i in range(x.shape[1])]), x.shape[0])


def _grad(problem: Problem, box: Interval) -> list[Interval]:
    return [_entry(gi, box.shape[0]) for gi in problem.plant.constraint_grad([box[:, i] for i in range(box.shape[1])])]


def _mid_rad(entries: list[Interval]) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = np.stack([e.lo for e in entries], axis=1), np.stack([e.hi for e in entries], axis=1)
    mid = np.clip(0.5 * (lo + hi), lo, hi)
    return mid, np.nextafter(np.maximum(hi - mid, mid - lo), np.inf)
