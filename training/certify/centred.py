"""A centred (mean-value) form of the filter's Lie row over a box, next to the interval product.

Why: the interval product grad h(B) . f(B) overestimates the row's range by O(width); near the
feasibility wall that forces splits down to tiny boxes.  For one fixed input u* in U (per box)
the filter's best row is at least the row at u*:

    sup_u L_f h + L_G h . u  >=  psi(x) = grad h(x) . F(x),    F = f + G u*,

and psi is C^1 wherever h is C^2 and f, G are C^1, so over a box B with centre c
(mean value theorem, per coordinate in inclusion form):

    psi(B)  subset of  psi(c) + sum_i D_i(B) (B_i - c_i),
    D_i = sum_k H_ik F_k + sum_k (dh/dx_k) dF_k/dx_i,

with H and grad h from the network's order-2 interval jets over B (``compiler.bounds.enclose``)
and J_f, J_G from the plant's enclosure.  Its excess is O(width^2).  The centre c is
Baumann's for the lower bound (``baumann_centre``): along a coordinate where D_i has one sign,
the end of the box where the row is least, so that coordinate costs nothing.  u* is the best vertex of U
at the box's centre (the sign of the midpoint of the L_G h enclosure); any u* in U is sound.

The header's float32 gradient lies within ``rounding.grad`` of the real one (the float32-mode
enclosure carries that bound), so its row at u* is at least psi - sum_i e_i |F_i|.

Where a value discontinuity may lie in B (Softplus' threshold: ``Jets.jumped``) or the network
is not twice differentiable, there is no mean-value form: the bound is -inf there and the
interval one counts.  Order 1 only (the order-2 row would need third derivatives).

D also measures how much each edge moves the row: width_i |D_i| (Kearfott's smear) picks the
edge to halve for a box whose feasibility bound fails.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.interval import Interval

from .terms import plant_terms

_UP = 1.0 + 2.0 ** -40          # rounds a short sum of nonnegative float64 terms up


@dataclass
class CentredRow:
    """Per box of the batch it was asked for."""
    lower: np.ndarray      # (B,) lower bound of the header's grad h . (f + G u*) over the box (-inf: no bound)
    slope: np.ndarray      # (B, n) max |d psi / dx_i| over the box (inf where unknown)
    grad: np.ndarray       # (B, n) max |dh / dx_i| over the box (real network)


def best_vertex(a_mid: np.ndarray, u_lo: np.ndarray, u_hi: np.ndarray) -> np.ndarray:
    """(B, m): the vertex of U maximising a . u for a = ``a_mid`` (ties: the upper end)."""
    return np.where(a_mid >= 0, u_hi[None, :], u_lo[None, :])


def vertices_and_centre(u_lo: np.ndarray, u_hi: np.ndarray) -> np.ndarray:
    """(2^m + 1, m): every vertex of the input box [u_lo, u_hi], then its centre."""
    u_lo, u_hi = np.asarray(u_lo, float), np.asarray(u_hi, float)
    k, j = np.arange(2 ** len(u_lo))[:, None], np.arange(len(u_lo))[None, :]
    bits = ((k >> j) & 1).astype(bool)                  # vertex k takes u_hi_j where bit j of k is set
    return np.concatenate([np.where(bits, u_hi, u_lo), 0.5 * (u_lo + u_hi)[None]])


def baumann_centre(D: Interval, box: Interval) -> np.ndarray:
    """(B, n): the centre that maximises the mean-value form's lower bound for the slope
    enclosure ``D`` (Baumann 1988): per coordinate, the lower end where the row cannot fall
    along it (D_i >= 0), the upper end where it cannot rise (D_i <= 0), else the point that
    balances the two ends, (d_hi lo - d_lo hi) / (d_hi - d_lo).  Any point of the box is
    sound; this one loses nothing along a monotone coordinate, where the midpoint loses
    |D_i| times half the width.  The midpoint where D is not finite."""
    lo, hi, d_lo, d_hi = box.lo, box.hi, D.lo, D.hi
    with np.errstate(all="ignore"):
        balanced = (d_hi * lo - d_lo * hi) / (d_hi - d_lo)
    centre = np.where(d_lo >= 0, lo, np.where(d_hi <= 0, hi, balanced))
    centre = np.where(np.isfinite(d_lo) & np.isfinite(d_hi) & np.isfinite(centre), centre, box.mid)
    return np.clip(centre, lo, hi)


def centred_row(model: Any, plant: Any, box: Interval, u_star: np.ndarray,
                grad_rounding: np.ndarray | None) -> CentredRow:
    """The centred-form bound of grad h . (f + G u*) over each box of ``box`` (B, n), for the
    fixed input ``u_star`` (B, m), less the float32 gradient's rounding (``grad_rounding`` (B, n),
    None: the real network's row)."""
    from compiler.bounds import enclose
    batch, n = box.shape
    u = Interval.point(np.asarray(u_star, dtype=float))
    with np.errstate(all="ignore"):
        jets = enclose(model, box, order=2)
        terms = plant_terms(plant, box, 1, with_input_jacobian=True)
        F = terms.f + (terms.G * u[:, None, :]).sum(-1)                       # (B, n)
        JF = terms.Jf + (terms.JG * u[:, :, None, None]).sum(1)               # (B, n, n): dF_k/dx_i
        D = (jets.hess * F[:, :, None]).sum(1) + (jets.grad[:, :, None] * JF).sum(1)
        centre = baumann_centre(D, box)
        cbox = Interval.point(centre)
        at_c = enclose(model, cbox, order=1)
        pc = plant_terms(plant, cbox, 1)
        Fc = pc.f + (pc.G * u[:, None, :]).sum(-1)
        psi = (at_c.grad * Fc).sum(-1) + (D * (box - centre)).sum(-1)
        lower = psi.lo
        if grad_rounding is not None:
            err = np.sum(np.asarray(grad_rounding) * F.mag, axis=-1) * _UP
            lower = np.nextafter(lower - err, -np.inf)
    bad = ~np.isfinite(lower)
    if jets.jumped is not None:
        bad |= jets.jumped
    lower = np.where(bad, -np.inf, lower)
    slope = np.where(np.isfinite(D.mag), D.mag, np.inf)
    return CentredRow(lower, slope, jets.grad.mag)
