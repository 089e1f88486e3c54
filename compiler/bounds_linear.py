"""Linear relaxations of the barrier h over boxes (CROWN / DeepPoly style, back substitution),
sound in floating point, next to the interval enclosures of ``compiler.bounds``.

Why: an interval enclosure loses the correlation between neurons; a linear bound
h(x) <= nu . x + c, maximised over the box only at the end, keeps it, so h's upper bound
(containment: h < 0 outside S) and lower bound (the box lies in the set) tighten.

How, per box (pre-activation enclosures z in [l, u] from ``enclose``'s forward pass, already
centred-form tightened):
* each activation gets two parallel lines  a z + b_lo <= sigma(z) <= a z + b_hi  on [l, u],
  a = the chord slope (any float: it only has to be finite), and the offsets bound
  g(z) = sigma(z) - a z over [l, u], soundly, from the activation enclosures:
  - convex there (sigma'' >= 0 on a smooth piece, or a convex kink: relu, leaky_relu with
    slope <= 1, elu with 0 <= alpha <= 1): max g at an endpoint, min g >= g(m) - |g'(m)| r
    (the tangent at the centre m, r the radius);
  - concave there: the mirror image;
  - otherwise the mean-value form g(m) + (sigma'([l, u]) - a)[-r, r] (Lebourg; the derivative
    enclosure holds the Clarke gradient at kinks), except across Softplus' threshold (a jump),
  - always intersected with the plain interval sigma([l, u]) - a [l, u];
* the periodic embedding's sin/cos columns are relaxed the same way, in the state coordinate
  they read (mean-value form with the enclosures of ``bounds_periodic``);
* back substitution: Lambda (coefficients on a layer's outputs) becomes Lambda W through a
  Dense layer and Lambda a through an activation; the constant collects Lambda b and the
  chosen offsets.  The float64 rounding of every product is bounded by Higham's gamma_k
  times the magnitudes |coefficients| |input enclosure| and added to the constant, so the
  coefficients need not be exact (any coefficients give a valid bound; only the constant has
  to be rounded up).  Finally max over the box of nu . x is taken in interval arithmetic.

The result holds the real network; ``linear_bounds(..., rounding_h=e)`` widens by the float32
header's rounding bound e (from ``enclose(..., float32=True)``) as the interval engine does.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .activations import ACTIVATIONS
from .bounds import DISCONTINUOUS, enclose
from .bounds_periodic import enclose_embedding
from .interval import U64, Interval, gamma
from .ir import Activation, Dense, Model, Periodic

_UP = 1.0 + 2.0 ** -40


def _convex_kinks(kind: str, params: dict) -> tuple[bool, bool]:
    """(convex, concave) across the kinks of a piecewise activation (False, False: neither)."""
    if kind == "relu":
        return True, False
    if kind == "leaky_relu":
        s = params["negative_slope"]
        return s <= 1.0, s >= 1.0
    if kind == "elu":
        a = params["alpha"]
        return 0.0 <= a <= 1.0, False
    return False, False


def relax(kind: str, params: dict, z: Interval) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a, b_lo, b_hi) with a z + b_lo <= sigma(z) <= a z + b_hi for every z in ``z`` (elementwise)."""
    enc = ACTIVATIONS[kind].enclosure
    l, u = z.lo, z.hi
    m = np.clip(0.5 * l + 0.5 * u, l, u)
    r = np.maximum(u - m, m - l) * _UP
    with np.errstate(all="ignore"):
        vl, vu = enc(Interval.point(l), params)[0], enc(Interval.point(u), params)[0]
        a = (vu.mid - vl.mid) / (u - l)
        fallback_a = enc(Interval.point(m), params)[1].mid
        a = np.where(np.isfinite(a) & (u - l > 1e-12 * (1 + np.abs(m))), a, fallback_a)
        a = np.where(np.isfinite(a), a, 0.0)
        A = Interval.point(a)
        value, d1, d2 = enc(z, params)
        plain = value - A * z
        g_l = vl - A * Interval.point(l)
        g_u = vu - A * Interval.point(u)
        v_m, d1_m, _ = enc(Interval.point(m), params)
        g_m = v_m - A * Interval.point(m)
        R = Interval(-r, r)
        tangent = g_m + (d1_m - A) * R             # holds for a convex g's lower / a concave g's upper side
        centred = g_m + (d1 - A) * R
    straddle = np.zeros(l.shape, dtype=bool)
    for k_lo, k_hi, _ in enc.kinks(params, False):
        straddle |= (l <= k_hi) & (u >= k_lo)
    kink_convex, kink_concave = _convex_kinks(kind, params)
    convex = np.where(straddle, kink_convex, d2.lo >= 0)
    concave = np.where(straddle, kink_concave, d2.hi <= 0)
    jump = straddle if kind in DISCONTINUOUS else np.zeros(l.shape, dtype=bool)
    hi = np.where(convex, np.maximum(g_l.hi, g_u.hi), np.where(jump, np.inf, centred.hi))
    hi = np.where(concave & ~convex, tangent.hi, hi)
    lo = np.where(concave, np.minimum(g_l.lo, g_u.lo), np.where(jump, -np.inf, centred.lo))
    lo = np.where(convex & ~concave, tangent.lo, lo)
    hi = np.where(np.isnan(hi), np.inf, hi)
    lo = np.where(np.isnan(lo), -np.inf, lo)
    return a, np.maximum(lo, plain.lo), np.minimum(hi, plain.hi)


def _periodic_relax(layer: Periodic, x: Interval) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(src (E,), a, b_lo, b_hi (B, E)): a x_src + b_lo <= phi(x_src) <= a x_src + b_hi over the box."""
    src, value, d1, _ = enclose_embedding(layer, x)
    xs = x[:, src]
    m = np.clip(xs.mid, xs.lo, xs.hi)
    r = np.maximum(xs.hi - m, m - xs.lo) * _UP
    at_m = enclose_embedding(layer, Interval.point(np.clip(x.mid, x.lo, x.hi)))[1]
    with np.errstate(all="ignore"):
        a = np.where(np.isfinite(d1.mid), d1.mid, 0.0)
        A = Interval.point(a)
        centred = at_m - A * Interval.point(m) + (d1 - A) * Interval(-r, r)
        plain = value - A * xs
    return src, a, np.maximum(centred.lo, plain.lo), np.minimum(centred.hi, plain.hi)


def _sum_up(terms: np.ndarray, axis: int = -1) -> np.ndarray:
    """An upper bound of the real sum of nonnegative float terms (k terms: gamma_k slack)."""
    k = terms.shape[axis]
    with np.errstate(invalid="ignore", over="ignore"):
        return np.sum(terms, axis=axis) * (1.0 + 2.0 * gamma(k + 1)) * _UP


def _dot_up(coef: np.ndarray, iv: Interval) -> np.ndarray:
    """Upper bound of max over y in iv of coef . y (last axis), rounded up: coef (B, K, w), iv (B, w)."""
    return _max_dot_up(coef, iv.lo[:, None, :], iv.hi[:, None, :])


def _max_dot_up(coef: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Upper bound of max over y in [lo, hi] of coef . y (last axis, all three broadcast), rounded up."""
    with np.errstate(invalid="ignore", over="ignore"):
        pick = np.where(coef >= 0, hi, lo)
        prod = coef * pick
        prod = np.where(coef == 0, 0.0, prod)
        total = np.sum(prod, axis=-1)
        slack = _sum_up(np.abs(prod)) * 2.0 * gamma(coef.shape[-1] + 1)
    return np.nextafter(total + slack, np.inf)


def linear_bounds(model: Model, box, rounding_h: np.ndarray | None = None) -> Interval:
    """Enclosure (B,) of h over each box from the two linear bounds (upper bound of h and of -h),
    intersected with the interval engine's; ``rounding_h`` (B,): the float32 header's rounding
    bound on h, added on both sides."""
    jets, box, lam, const = _planes(model, box)
    if lam is None:
        return jets.h
    const = const + _dot_up(lam, box)
    const = np.where(np.isnan(const), np.inf, const)
    upper, neg_lower = const[:, 0], const[:, 1]
    lo, hi = np.maximum(-neg_lower, jets.h.lo), np.minimum(upper, jets.h.hi)
    if rounding_h is not None:
        lo = np.nextafter(lo - rounding_h, -np.inf)
        hi = np.nextafter(hi + rounding_h, np.inf)
    return Interval(lo, hi, check=False)


@dataclass
class LowerPlane:
    """h(x) >= -(coef . x) - offset for every x of the box it was built on (B boxes): the
    back substitution's bound before it is maximised over the box, so it bounds h on any part
    of the box (``over``) at the cost of one dot product, with no network evaluation."""
    coef: np.ndarray        # (B, n)
    offset: np.ndarray      # (B,), rounded up, with the float32 header's rounding bound when given

    def over(self, cells: Interval) -> np.ndarray:
        """(B, K) lower bounds of h over K cells (B, K, n) of each box (rounded down)."""
        top = _max_dot_up(self.coef[:, None, :], cells.lo, cells.hi)
        with np.errstate(invalid="ignore", over="ignore"):
            low = np.nextafter(-top - self.offset[:, None], -np.inf)
        return np.where(np.isnan(low), -np.inf, low)


def lower_plane(model: Model, box, rounding_h: np.ndarray | None = None) -> LowerPlane | None:
    """The linear lower bound of h over each box (B, n) as a plane (``LowerPlane``); None for a
    model the back substitution does not cover (an unfolded Affine layer)."""
    _, _, lam, const = _planes(model, box)
    if lam is None:
        return None
    offset = const[:, 1] if rounding_h is None else np.nextafter(const[:, 1] + rounding_h, np.inf)
    return LowerPlane(lam[:, 1, :], np.where(np.isnan(offset), np.inf, offset))


def upper_plane(model: Model, box, rounding_h: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """(coef (B, n), offset (B,)) with h(x) <= coef . x + offset for every x of each box (B, n),
    the float32 header's rounding bound included when given; None for a model the back
    substitution does not cover (an unfolded Affine layer)."""
    _, _, lam, const = _planes(model, box)
    if lam is None:
        return None
    offset = const[:, 0] if rounding_h is None else np.nextafter(const[:, 0] + rounding_h, np.inf)
    return lam[:, 0, :], np.where(np.isnan(offset), np.inf, offset)


def _planes(model: Model, box):
    """(interval jets, checked box, lam (B, 2, n), const (B, 2)) with +-h(x) <= lam_k . x + const_k
    on each box (lam None: an unfolded Affine layer, no planes)."""
    trace: list = []
    jets = enclose(model, box, order=1, trace=trace)
    box = trace[0][1]                     # the checked (B, n) box
    batch = box.shape[0]
    lam = np.broadcast_to(np.array([[1.0], [-1.0]]), (batch, 2, 1)).copy()   # (B, K, width): +h and -h
    const = np.zeros((batch, 2))
    for layer, x_in in reversed(trace):
        mag = x_in.mag
        if isinstance(layer, Dense):
            w = layer.weight                                            # (out, in)
            const = const + _dot_up(lam, Interval.point(np.broadcast_to(layer.bias, (batch, len(layer.bias)))))
            with np.errstate(invalid="ignore", over="ignore"):
                new = lam @ w
                err = _sum_up((np.abs(lam) @ np.abs(w)) * mag[:, None, :]) * gamma(w.shape[0] + 2)
            const = np.nextafter(const + err, np.inf)
            lam = new
        elif isinstance(layer, Activation):
            a, b_lo, b_hi = relax(layer.kind, dict(layer.params), x_in)
            const = const + _dot_up(lam, Interval(b_lo, b_hi))
            with np.errstate(invalid="ignore", over="ignore"):
                new = lam * a[:, None, :]
                err = _sum_up(np.abs(new) * mag[:, None, :]) * 2 * U64
            const = np.nextafter(const + err, np.inf)
            lam = new
        elif isinstance(layer, Periodic):
            src, a, b_lo, b_hi = _periodic_relax(layer, x_in)
            const = const + _dot_up(lam, Interval(b_lo, b_hi))
            coef = lam * a[:, None, :]                                    # (B, K, E)
            onehot = (src[:, None] == np.arange(x_in.shape[1])[None, :]).astype(float)   # (E, n)
            with np.errstate(invalid="ignore", over="ignore"):
                new = coef @ onehot
                err = _sum_up(np.abs(coef) * x_in.mag[:, src][:, None, :]) * gamma(len(src) + 2)
            const = np.nextafter(const + err, np.inf)
            lam = new
        else:                      # an unfolded Affine layer: canonical models have none
            return jets, box, None, None
    return jets, box, lam, const
