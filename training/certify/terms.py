"""Interval enclosures of the barrier's Lie terms over a batch of boxes.

From the network jets (``compiler.bounds.enclose``: h, grad h, Hessian) and the plant's
enclosure (f, G, f'), in interval arithmetic:

    L_f h = grad . f,   L_G h = grad . G,
    L_f^2 h = f^T H f + grad . (J_f f),   L_Gj L_f h = g_j^T H f + grad . (J_f g_j),
    psi1 = L_f h + alpha1 h.

``float32=True`` asks the network enclosure to also hold what the float32 header computes
(the filter's own numbers); the plant terms are float64 either way (the filter evaluates f
and G in float64 on the host; the firmware's float32 plant rounding is inside the rounding
bound the network enclosure states only for the network -- see the certificate's ``rounding``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from compiler.interval import Interval, as_interval


@dataclass
class PlantTerms:
    f: Interval            # (B, n)
    G: Interval            # (B, n, m)
    Jf: Interval | None    # (B, n, n), order 2 only
    constraint: Interval   # (B,)
    JG: Interval | None = None   # (B, m, n, n): d g_j / d x, with_input_jacobian only


@dataclass
class Terms:
    h: Interval            # (B,)
    grad: Interval         # (B, n)
    Lf: Interval           # (B,)
    LG: Interval           # (B, m)
    psi1: Interval | None = None   # order 2
    L2: Interval | None = None     # L_f^2 h
    LGLf: Interval | None = None   # (B, m): L_G L_f h
    rounding: Any = None


def _entry(value: Any, batch: int) -> Interval:
    iv = as_interval(value)
    return iv.broadcast_to((batch,)) if iv.shape != (batch,) else iv


def _matrix(rows: Sequence[Sequence[Any]], batch: int) -> Interval:
    rows = list(rows)
    if not rows or not len(rows[0]):          # no columns (G of an autonomous plant, m = 0)
        empty = np.zeros((batch, len(rows), 0))
        return Interval(empty, empty.copy())
    return Interval.stack([Interval.stack([_entry(v, batch) for v in row], axis=-1) for row in rows], axis=-2)


def plant_terms(plant: Any, box: Interval, order: int, with_input_jacobian: bool = False) -> PlantTerms:
    """f, G (and J_f for order 2) and the constraint over each box of ``box`` (B, n)."""
    batch, n = box.shape
    xs = [box[:, i] for i in range(n)]
    f = Interval.stack([_entry(v, batch) for v in plant.f(xs)], axis=-1)
    G = _matrix(plant.G(xs), batch)
    Jf = _matrix(plant.jac_f(xs), batch) if order == 2 or with_input_jacobian else None
    JG = None
    if with_input_jacobian:
        mats = [_matrix(M, batch) for M in plant.jac_G(xs)]
        JG = Interval.stack(mats, axis=1) if mats else Interval(np.zeros((batch, 0, n, n)), np.zeros((batch, 0, n, n)))
    return PlantTerms(f, G, Jf, _entry(plant.constraint(xs), batch), JG)


def _enclose(model: Any, box: Interval, order: int, float32: bool):
    """The network's jets over each box, computed once per distinct box of the coordinates the
    network reads: boxes that differ only where its first-layer weights are 0 (the pendulum's
    theta_dot; the pieces of one tube cut along such a coordinate) have the same jets, since a
    zero column contributes exactly 0 to every enclosure and rounding bound.  (The batch's size
    may move a bound by an ulp through BLAS's summation order; each is a rigorous enclosure.)"""
    from compiler.bounds import enclose
    read = model.reads_state()
    if read.all() or len(box.lo) < 2:
        return enclose(model, box, order=order, float32=float32)
    keys = np.concatenate([box.lo[:, read], box.hi[:, read]], axis=1)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    if len(first) == len(keys):
        return enclose(model, box, order=order, float32=float32)
    return take_rows(enclose(model, box[first], order=order, float32=float32), inverse.reshape(-1))


def take_rows(jets: Any, rows: Any) -> Any:
    """The jets (or plant terms) of the boxes ``rows`` (indices into the batch, or a slice):
    every per-box field."""
    from dataclasses import fields, is_dataclass, replace
    def pick(value: Any) -> Any:
        if isinstance(value, Interval):
            return value[rows]
        if isinstance(value, np.ndarray) and value.ndim >= 1:
            return value[rows]
        if is_dataclass(value):
            return replace(value, **{f.name: pick(getattr(value, f.name)) for f in fields(value)})
        return value
    return pick(jets)


def row_rate_slices(model: Any, plant: PlantTerms, box: Interval, slices: list[tuple[np.ndarray, np.ndarray]]
                    ) -> tuple[Interval, list[tuple[Interval, Interval]]]:
    """[(d2/dt2 h, d/dt h)] over each box for every held u in each input slice [u_lo, u_hi],
    order 1, with F = f + G u:  d/dt h = grad . F,  d2/dt2 h = F^T H F + grad . ((J_f + sum_j
    u_j J_gj) F) (the rate of the row phi_u = L_f h + L_G h u + gamma h is d2/dt2 h + gamma
    d/dt h), and h.  The network's order-2 jets over the state box are computed once; only F
    changes with the slice."""
    jets = _enclose(model, box, 2, False)
    H, grad = jets.hess, jets.grad
    out = []
    for u_lo, u_hi in slices:
        u = Interval(np.asarray(u_lo, float), np.asarray(u_hi, float))
        F = plant.f + (plant.G * u).sum(-1)
        JF = plant.Jf + (plant.JG * u[None, :, None, None]).sum(1)
        second = (H * F[:, :, None] * F[:, None, :]).sum(-1).sum(-1) + _dot(grad, (JF * F[:, None, :]).sum(-1))
        out.append((second, _dot(grad, F)))
    return jets.h, out


def _dot(a: Interval, b: Interval) -> Interval:
    return (a * b).sum(-1)


def lie_terms(model: Any, plant: PlantTerms, box: Interval, order: int, gains: dict[str, float],
              float32: bool) -> Terms:
    """Enclosures of h and its Lie terms over each box (see the module docstring)."""
    jets = _enclose(model, box, order, float32)
    grad, f, G = jets.grad, plant.f, plant.G
    Lf = _dot(grad, f)
    LG = (grad[:, :, None] * G).sum(1)
    terms = Terms(jets.h, grad, Lf, LG, rounding=getattr(jets, "rounding", None))
    if order == 2:
        H, Jf = jets.hess, plant.Jf
        Jff = (Jf * f[:, None, :]).sum(-1)
        terms.psi1 = Lf + gains["alpha1"] * jets.h
        terms.L2 = (H * f[:, :, None] * f[:, None, :]).sum(-1).sum(-1) + _dot(grad, Jff)
        cols = []
        for j in range(G.shape[2]):
            g = G[:, :, j]
            Jfg = (Jf * g[:, None, :]).sum(-1)
            cols.append((H * g[:, :, None] * f[:, None, :]).sum(-1).sum(-1) + _dot(grad, Jfg))
        terms.LGLf = Interval.stack(cols, axis=-1)
    return terms


def sup_over_inputs(a: Interval, u_lo: np.ndarray, u_hi: np.ndarray) -> Interval:
    """Enclosure of sup_{u in box} a . u = sum_j g_j(a_j), g_j(a) = max(a u_lo_j, a u_hi_j),
    over a in the interval a (B, m): g_j is linear on each side of 0 (a u_hi for a >= 0,
    a u_lo for a <= 0), so its range is spanned by the endpoint values and g_j(0) = 0."""
    lo_end, hi_end = Interval.point(a.lo), Interval.point(a.hi)
    at_lo = [lo_end * u_hi, lo_end * u_lo]          # g at a.lo for a.lo >= 0 / a.lo <= 0
    at_hi = [hi_end * u_hi, hi_end * u_lo]
    g_lo = Interval(np.where(a.lo >= 0, at_lo[0].lo, at_lo[1].lo), np.where(a.lo >= 0, at_lo[0].hi, at_lo[1].hi))
    g_hi = Interval(np.where(a.hi >= 0, at_hi[0].lo, at_hi[1].lo), np.where(a.hi >= 0, at_hi[0].hi, at_hi[1].hi))
    straddle = (a.lo < 0) & (a.hi > 0)
    lo = np.minimum(g_lo.lo, g_hi.lo)
    hi = np.maximum(g_lo.hi, g_hi.hi)
    lo = np.where(straddle, np.minimum(lo, 0.0), lo)
    hi = np.where(straddle, np.maximum(hi, 0.0), hi)
    return Interval(lo, hi, check=False).sum(-1)
