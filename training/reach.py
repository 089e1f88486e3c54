"""The states a plant can reach within one control period: a sound interval tube.

The sampled-data check of the certifier (notes/certification.md section 5) bounds the Lie
terms over every state the plant can visit between two control samples. ``one_period_tube``
encloses that set for a batch of boxes of initial states and any input with values in a box
(zero-order hold, or anything switching within the period; one input box for all, or one
per box of states, e.g. the inputs a filter can return there), by the classic a-priori
enclosure of validated ODE solvers (Lohner; Nedialkov, Jackson & Corliss 1999):

    R_{k+1} = box + [0, T] * (f(R_k) + G(R_k) u_box),   accepted once R_{k+1} is inside R_k.

Why an accepted R is sound (Picard-Lindelof / Banach): let R be a bounded box with
P(R) := box + [0, T] * F(R) inside R, F(R) an interval enclosure of {f(x) + G(x) u : x in R,
u in u_box}. For x0 in the box and a measurable input u(t) in u_box, the Picard operator
(Px)(t) = x0 + int_0^t f(x(s)) + G(x(s)) u(s) ds maps the closed convex set of continuous
curves [0, T] -> R into itself (the integral is t times an average of values in the box
F(R), so it lies in t F(R)), and it is a contraction there in a Bielecki-weighted sup
norm because f and G are Lipschitz on the bounded R. Its unique fixed point is the
solution, so the solution exists on [0, T] and stays in P(R). Every later iterate
box + [0, T] F(R') of an enclosure R' is again an enclosure, so accepted tubes are refined
by a few more steps and intersected.

A first-order Taylor form tightens it further: with D(R) an enclosure of
(J_f + sum_j u_j J_{g_j}) (f + G u) over R and u_box,

    x(t) in x0 + t (f(x0) + G(x0) u_avg) + t^2/2 D(R),   u_avg in u_box,

because f(x(s)) - f(x0) and (G(x(s)) - G(x0)) u(s) are integrals of J xdot over [0, s] with
x in R, and int_0^t int_0^s (values in the box D) = t^2/2 times a point of D. It gives the
tube box + [0, T] F(box) + [0, T^2/2] D(R) and the end set box + T F(box) + T^2/2 D(R).
Interval arithmetic is outward-rounded (compiler.interval), so all of it holds in float64.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from compiler.errors import ShapeError
from compiler.interval import Interval, as_interval
from systems.enclosure import PlantEnclosure

__all__ = ["Tube", "one_period_tube", "vector_field"]

MAX_ITERATIONS = 10       # Picard steps before a box is given up (callers split it)
REFINEMENTS = 2           # extra Picard steps once a tube has closed
INFLATION = 0.1           # epsilon-inflation of an open iterate: share of its width ...
ABSOLUTE_INFLATION = 1e-12  # ... plus this times (1 + |x|), for zero-width components


@dataclasses.dataclass(frozen=True)
class Tube:
    """One-period reachable sets of a batch of boxes.

    ``R`` (B, n) contains x(t) for every t in [0, T], x(0) in the box and every input with
    values in u_box; ``end`` (B, n) contains x(T) alone (tighter). Both are meaningless
    where ``ok`` (B,) is False: the iteration did not close, and the box must be split.
    """

    R: Interval
    end: Interval
    ok: np.ndarray


def _batch(entry: Any, batch: int) -> Interval:
    """A plant entry (Interval or exact Python float) as an Interval of shape (batch,)."""
    return as_interval(entry).broadcast_to((batch,))


def _columns(box: Interval) -> list[Interval]:
    return [box[:, i] for i in range(box.shape[1])]


def _is_zero(entry: Any) -> bool:
    return type(entry) is float and entry == 0.0


def vector_field(plant: PlantEnclosure, box: Interval, u_box: Interval) -> Interval:
    """Enclosure (B, n) of f(x) + G(x) u over x in each box and u in u_box ((m,) or (B, m))."""
    batch = box.shape[0]
    xs = _columns(box)
    f, G = plant.f(xs), plant.G(xs)
    rows = []
    for i in range(plant.n):
        total: Any = f[i]
        for j in range(plant.m):
            if not _is_zero(G[i][j]):
                total = total + G[i][j] * u_box[..., j]
        rows.append(_batch(total, batch))
    return Interval.stack(rows, axis=1)


def _field_derivative(plant: PlantEnclosure, R: Interval, u_box: Interval, F: Interval) -> Interval:
    """Enclosure (B, n) of d/dt (f + G u) = (J_f + sum_j u_j J_{g_j}) (f + G u) over R, u_box
    (u held or switching: only J_f and J_G are differentiated; F encloses f + G u on R)."""
    batch = R.shape[0]
    xs = _columns(R)
    Jf, JG = plant.jac_f(xs), plant.jac_G(xs)
    rows = []
    for i in range(plant.n):
        total: Any = 0.0
        for k in range(plant.n):
            coeff: Any = Jf[i][k]
            for j in range(plant.m):
                if not _is_zero(JG[j][i][k]):
                    coeff = coeff + JG[j][i][k] * u_box[..., j]
            if not _is_zero(coeff):
                total = total + coeff * F[:, k]
        rows.append(_batch(total, batch))
    return Interval.stack(rows, axis=1)


def _inflate(R: Interval) -> Interval:
    """R widened by INFLATION of its width and a tiny absolute term (epsilon-inflation)."""
    with np.errstate(invalid="ignore", over="ignore"):
        pad = INFLATION * R.width + ABSOLUTE_INFLATION * (1.0 + R.mag)
    return R + Interval(-pad, pad)


def _finite_rows(R: Interval) -> np.ndarray:
    return np.all(np.isfinite(R.lo) & np.isfinite(R.hi), axis=-1)


def _check(plant: PlantEnclosure, box: Interval, u_box: Interval, T: float) -> None:
    if box.ndim != 2 or box.shape[1] != plant.n:
        raise ShapeError(f"box must be an Interval of shape (B, {plant.n}), got {box.shape}")
    if u_box.shape not in ((plant.m,), (box.shape[0], plant.m)):
        raise ShapeError(f"u_box must be an Interval of shape ({plant.m},) or (B, {plant.m}) = "
                         f"({box.shape[0]}, {plant.m}), got {u_box.shape}")
    if not (isinstance(T, (int, float)) and math.isfinite(T) and T > 0):
        raise ValueError(f"the period T must be a finite number > 0, got {T!r}")


def _where(rows: np.ndarray, a: Interval, b: Interval) -> Interval:
    """The rows of a where ``rows`` is True, the rows of b elsewhere ((B, n) Intervals)."""
    mask = rows[:, None]
    return Interval(np.where(mask, a.lo, b.lo), np.where(mask, a.hi, b.hi), check=False)


def one_period_tube(plant: PlantEnclosure, box: Interval, u_box: Interval, T: float) -> Tube:
    """Enclose every state reachable within [0, T] from each box (B, n) under any input in
    u_box (m,), or in its own input box per box (u_box (B, m), e.g. the inputs a filter can
    return there): Picard iteration with epsilon-inflation, refined, intersected with a
    first-order Taylor form (see the module docstring for why it is sound)."""
    _check(plant, box, u_box, T)
    T = float(T)
    t = Interval(0.0, T)
    F_box = vector_field(plant, box, u_box)
    R = _inflate(box + t * F_box)
    ok = np.zeros(box.shape[0], dtype=bool)
    refinements = np.zeros(box.shape[0], dtype=int)
    for _ in range(MAX_ITERATIONS + REFINEMENTS):
        nxt = box + t * vector_field(plant, R, u_box)
        closed = ok | (np.all(nxt.subset(R), axis=-1) & _finite_rows(R))
        # closed rows: R and nxt both enclose the solution, keep their intersection;
        # open rows: inflate the new iterate and try again
        both = Interval(np.maximum(nxt.lo, R.lo), np.minimum(nxt.hi, R.hi), check=False)
        R = _where(closed, both, _inflate(nxt))
        refinements += ok
        ok = closed & _finite_rows(R)
        if ok.all() and np.all(refinements >= REFINEMENTS):
            break

    F_R = vector_field(plant, R, u_box)
    end = box + T * F_R                                      # Picard at t = T alone
    if ok.any():
        R_ok, box_ok = R[ok], box[ok]
        u_ok = u_box[ok] if u_box.ndim == 2 else u_box
        D = _field_derivative(plant, R_ok, u_ok, F_R[ok])
        half_T2 = Interval.point(T) * T / 2.0
        F_box_ok = F_box[ok]
        # two enclosures of one set: never disjoint (intersect raises if they were)
        R_ok = R_ok.intersect(box_ok + t * F_box_ok + Interval(0.0, half_T2.hi) * D)
        end_ok = end[ok].intersect(R_ok).intersect(box_ok + T * F_box_ok + half_T2 * D)
        R, end = R.copy(), end.copy()
        R[ok] = R_ok
        end[ok] = end_ok
    return Tube(R=R, end=end, ok=ok)
