"""Containment of a ReLU network piece by piece (h < 0 wherever the constraint c fails).

Why: the back substitution's upper plane of h (``containment.py``) relaxes every unstable
neuron over the whole box, so a box that holds both the keep-out ball's rim and the set's edge
fails unless the two are further apart than that relaxation's slack; on the trained 3 x 8
spacecraft student 21,157 of the search's 23,419 failing boxes failed containment.  On each
piece S of the box (``compiler.bounds_pieces``, widened by the float32 header's error, so the
header's own pattern at every state is one of them) h is exactly g . x + c, and the states where
S applies satisfy its region's cuts; with c(x) <= c(x_c) + grad c(B) . (x - x_c), every state
of the box where c < 0 also satisfies the linear row

    -gmid . d + (gamma_rad . r - c_lo(x_c)) >= 0,   d = x - x_c,

(gmid, gamma_rad: the midpoint and radius of grad c over the box).  The largest g . d over the
piece's cuts and that row is bounded by ``region_dual`` (weak duality: any multipliers give a
bound; +large where they prove the piece never meets c < 0 in the box), so the box's score is

    min over pieces of  -(h_S(x_c) + eps + max g . d)    (> 0: proven),

eps: the header's rounding bound on h plus the piece's own float64 rounding.  A box with more
than ``MAX_UNSTABLE`` unstable neurons gets no score here (-inf).
"""
from __future__ import annotations

import numpy as np

from compiler.bounds_pieces import pieces
from compiler.interval import Interval, gamma
from compiler.passes import canonicalize

from . import region_dual
from .level_pieces import MAX_UNSTABLE
from .patterns import preactivation_enclosures
from .problem import Problem
from .terms import _entry

CHUNK_BOXES = 256
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
    centre = np.clip(box.mid, box.lo, box.hi)
    radius = np.nextafter(np.maximum(box.hi - centre, centre - box.lo), np.inf)
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
        ball_a, ball_b = _constraint_row(problem, box)
        a = np.concatenate([a[weak], ball_a[b[weak], None, :]], axis=1)
        rhs = np.concatenate([rhs[weak], ball_b[b[weak], None]], axis=1)
        zero = np.zeros(len(weak))
        args = (-g[weak], np.zeros_like(g[weak]), zero, zero, a, rhs, r[weak])
        least = region_dual.value(region_dual.ascend(*args, zero), *args)     # <= min of -g . d
        with np.errstate(invalid="ignore", over="ignore"):
            worst = h_c[weak] + eps[weak] - least                                   # >= max h_S
            worst = np.nextafter(worst + 4 * _U * (np.abs(h_c[weak]) + eps[weak] + np.abs(least)), np.inf)
        score[weak] = np.where(np.isnan(worst), -np.inf, -worst)
    out = np.full(batch, np.inf)
    np.minimum.at(out, b, score)
    return np.where(found.enumerated, out, -np.inf)


def _constraint_row(problem: Problem, box: Interval) -> tuple[np.ndarray, np.ndarray]:
    """(a (B, n), b (B,)): every state of each box where c < 0 has a . (x - x_c) + b >= 0."""
    batch, n = box.shape
    centre = np.clip(box.mid, box.lo, box.hi)
    radius = np.nextafter(np.maximum(box.hi - centre, centre - box.lo), np.inf)
    c_at = _entry(problem.plant.constraint([Interval.point(centre[:, i]) for i in range(n)]), batch)
    grad = [_entry(gi, batch) for gi in problem.plant.constraint_grad([box[:, i] for i in range(n)])]
    g_lo, g_hi = np.stack([gi.lo for gi in grad], axis=1), np.stack([gi.hi for gi in grad], axis=1)
    g_mid = np.clip(0.5 * (g_lo + g_hi), g_lo, g_hi)
    g_rad = np.nextafter(np.maximum(g_hi - g_mid, g_mid - g_lo), np.inf)
    with np.errstate(invalid="ignore", over="ignore"):
        spread = np.einsum("bi,bi->b", g_rad, radius) * _UP
        b = np.nextafter(spread - c_at.lo + 4 * _U * (spread + np.abs(c_at.lo)), np.inf)
    b = np.where(np.isnan(b), np.inf, b)
    return -g_mid, b
