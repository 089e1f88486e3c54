"""Containment (h < 0 wherever the constraint c fails) on boxes the constraint's edge cuts.

Why: the interval check asks h < 0 over the whole box as soon as c may be negative somewhere
in it, so a box holding both the obstacle's rim and the set's edge a little further out fails
however good the barrier is, and the search splits such boxes down to the clearance between
the two (a planar point robot: containment took up to 40% of the boxes).

How (a Lagrangian relaxation): for any mu >= 0, where c(x) < 0,
    h(x) <= h(x) - mu c(x) <= U(mu) = max over the box of (upper plane of h - mu c),
so U(mu) < 0 proves the box.  h's upper plane comes from the back substitution
(``compiler.bounds_linear.upper_plane``, the float32 header's rounding included); c enters by
its mean-value form c(x_c) + grad c(box) . (x - x_c), from the plant's enclosure of grad c.
U is convex and piecewise linear in mu, so its least value is at mu = 0 or at one of the n
kinks where a coordinate's term changes sides; all are tried, each bounded in outward-rounded
interval arithmetic (mu need not be exact).
"""
from __future__ import annotations

import numpy as np

from compiler.bounds_linear import upper_plane
from compiler.interval import Interval

from .problem import Problem
from .terms import _entry


def traded_containment(problem: Problem, box: Interval, rounding_h: np.ndarray | None) -> np.ndarray:
    """(B,) a containment score per box (> 0: h < 0 wherever c < 0 in the box; -inf: no bound):
    -min over mu of U(mu)."""
    batch, n = box.shape
    score = np.full(batch, -np.inf)
    grad_of = problem.plant.constraint_grad
    plane = None if grad_of is None else upper_plane(problem.model, box, rounding_h)
    if plane is None:
        return score
    coef, offset = plane
    centre = np.clip(box.mid, box.lo, box.hi)
    radius = np.nextafter(np.maximum(box.hi - centre, centre - box.lo), np.inf)
    c_at = _entry(problem.plant.constraint([Interval.point(centre[:, i]) for i in range(n)]), batch)
    grad = [_entry(g, batch) for g in grad_of([box[:, i] for i in range(n)])]
    base = Interval.point(offset)
    for i in range(n):
        base = base + Interval.point(coef[:, i]) * Interval.point(centre[:, i])
    with np.errstate(divide="ignore", invalid="ignore"):
        kinks = [2 * coef[:, i] / (grad[i].lo + grad[i].hi) for i in range(n)]
    best = np.full(batch, np.inf)
    for mu in [np.zeros(batch)] + [np.where(np.isfinite(k) & (k > 0), k, 0.0) for k in kinks]:
        m = Interval.point(mu)
        with np.errstate(invalid="ignore", over="ignore"):
            top = (base - m * c_at).hi
            for i in range(n):
                a, r = Interval.point(coef[:, i]), Interval.point(radius[:, i])
                top = np.nextafter(top + np.maximum(((a - m * grad[i]) * r).hi, ((m * grad[i] - a) * r).hi), np.inf)
        best = np.fmin(best, np.where(np.isnan(top), np.inf, top))
    return np.where(np.isfinite(best), -best, -np.inf)
