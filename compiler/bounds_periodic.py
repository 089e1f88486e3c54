"""Sound enclosures of the periodic input embedding over a box, and of the float32 header's
error in evaluating it (for ``compiler.bounds``).

Embedded column j reads state coordinate i = src_j through phi_j = identity, sin(w .) or
cos(w .) (w = 2 pi / P in float64, ``ir.Periodic.frequencies``). Over a box, phi, phi' and
phi'' are enclosed with ``compiler.interval``'s sin / cos (sound: the image of sin over an
interval, widened for numpy's rounding) of the outward-rounded w [x_lo, x_hi]:
    sin: sin(wx), w cos(wx), -w^2 sin(wx);   cos: cos(wx), -w sin(wx), -w^2 cos(wx).
A box across the seam (theta in [pi - r, pi + r], or any width) needs nothing special: the
enclosures of sin and cos hold over any interval (+-1 wherever an extremum lies inside).

float32 header (kernels/periodic.hpp): it computes p = fl(fl32(w) x_f) with the state
rounded to x_f, then m_sincos(p), then the channels fl(fl(w_f c) t) and, for order 2,
fl(fl(fl(w_f^2) s) t1 t2) + fl(w_f c) u. With u = 2^-24:
  * argument: |p - w x| <= |w| |x| (3u + 3u^2 + u^3) + (3|w| + 1) 2^-149;
  * m_sincos: at most 1 ulp of the result (tests/test_periodic_header.py, and every float in
    [-64 pi, 64 pi]: benchmarks/trig_ulps.py), counted as ``SINCOS_ULPS`` = 2 ulps (x2 safety),
    i.e. 4u |sin p| + 2^-148; sin and cos are 1-Lipschitz in the argument;
  * e_s = e_arg + 4u (|s| + e_arg) + 2^-148 (likewise e_c); the derivatives, with the rounding
    of w_f and of each product (3 roundings for phi', 5 for phi''), doubled:
    e_phi' = |w| (1 + 8u) (e_c + 8u |c|),  e_phi'' = w^2 (1 + 12u) (e_s + 12u |s|);
  * beyond the header's argument limit (``emit_periodic.argument_limit``) the header answers
    NaN: the bound there is +inf.
A passed-through coordinate carries the state's own rounding u |x| + 2^-149, as without an
embedding.
"""
from __future__ import annotations

import numpy as np

from . import interval as iv
from .emit_periodic import argument_limit
from .interval import Interval
from .ir import Periodic

U32 = 2.0 ** -24
TINY32 = 2.0 ** -149
SINCOS_ULPS = 2.0            # m_sincos' asserted 1-ulp bound, doubled
_UP = 1.0 + 2.0 ** -40


def _columns(layer: Periodic) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    cols = layer.columns()
    freq = layer.frequencies()
    src = np.array([i for i, _ in cols], dtype=np.intp)
    kind = np.array([k for _, k in cols])
    w = np.array([freq.get(i, 0.0) for i, _ in cols])
    return src, kind == "sin", kind == "cos", w


def enclose_embedding(layer: Periodic, x: Interval) -> tuple[np.ndarray, Interval, Interval, Interval]:
    """(source coordinate per column (E,), phi, phi', phi'' over x (B, n)), each an Interval (B, E)."""
    src, is_sin, is_cos, w = _columns(layer)
    xs = x[:, src]
    arg = xs * w                                   # outward rounded
    s, c = iv.sin(arg), iv.cos(arg)
    one, zero = Interval.point(np.ones(xs.shape)), Interval.point(np.zeros(xs.shape))
    d1s, d1c = c * w, s * (-w)
    w2 = Interval.point(w) * Interval.point(w)     # w^2 enclosed, not rounded
    d2s, d2c = -(s * w2), -(c * w2)

    def pick(a_sin: Interval, a_cos: Interval, a_x: Interval) -> Interval:
        return Interval(np.where(is_sin, a_sin.lo, np.where(is_cos, a_cos.lo, a_x.lo)),
                        np.where(is_sin, a_sin.hi, np.where(is_cos, a_cos.hi, a_x.hi)), check=False)

    return src, pick(s, c, xs), pick(d1s, d1c, one), pick(d2s, d2c, zero)


def embedding_errors(layer: Periodic, box: Interval, order: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bounds (B, E) on |float32 header - real| of the embedded value, phi' and phi'' over ``box``."""
    src, is_sin, is_cos, w = _columns(layer)
    aw = np.abs(w)
    xm = box.mag[:, src]
    e_arg = (aw * xm * (3 * U32 + 3 * U32 ** 2 + U32 ** 3) + (3 * aw + 1) * TINY32) * _UP
    _, value, _, _ = enclose_embedding(layer, box)
    mag = value.mag                                # |s| (sin columns) or |c| (cos columns)
    # the partner's magnitude: sin columns' phi' uses c, cos columns' uses s
    partner = np.where(is_sin, np.roll(mag, -1, axis=1), np.where(is_cos, np.roll(mag, 1, axis=1), 0.0))
    e_own = (e_arg + 2 * SINCOS_ULPS * U32 * (mag + e_arg) + SINCOS_ULPS * TINY32) * _UP
    e_partner = np.where(is_sin, np.roll(e_own, -1, axis=1), np.where(is_cos, np.roll(e_own, 1, axis=1), 0.0))
    trig = is_sin | is_cos
    e_v = np.where(trig, e_own, (U32 * xm + TINY32) * _UP)
    e_d1 = np.where(trig, aw * (1 + 8 * U32) * (e_partner + 8 * U32 * partner) * _UP, 0.0)
    e_d2 = np.where(trig, aw * aw * (1 + 12 * U32) * (e_own + 12 * U32 * mag) * _UP, 0.0) if order >= 2 else \
        np.zeros_like(e_v)
    freq = layer.frequencies()
    for i, _ in layer.periods:                     # beyond m_sincos' range the header answers NaN
        beyond = box.mag[:, i] > argument_limit(freq[i], "float")
        cols = src == i
        for e in (e_v, e_d1, e_d2):
            e[np.ix_(beyond, cols)] = np.inf
    return e_v, e_d1, e_d2
