"""Pre-activation bounds over a box by affine arithmetic with a fresh noise symbol per relaxed
neuron (a zonotope, DeepZ style), next to the interval enclosures of ``compiler.bounds``.

Why: the ReLU certifier enumerates the activation patterns of a box's unstable neurons
(``training/certify/patterns.py``), and which neurons count as unstable comes from their
pre-activation bounds.  Plain intervals lose the correlation between neurons layer by layer: on
the 3 x 16 spacecraft student, boxes of 1/16 of the domain per edge centred on {h = 0} had a
median of 17 interval-unstable neurons against 8 that truly change sign (sampled); these bounds
give 11.  ``bounds_lie``'s forms keep one interval remainder per neuron instead of a symbol, and
give 14: the remainder is summed in magnitude through the next layer, where a symbol's signed
coefficients cancel.

How: every value is a ``bounds_lie.Form`` over the symbols s = (x - c) / r (the box) and
e_1, e_2, ... in [-1, 1] (one per relaxed neuron), with an interval remainder for the float64
rounding.  Dense maps it linearly (rounding bounded by Higham's gamma into the remainder); an
activation gets two parallel lines a z + [b_lo, b_hi] (ReLU: exact where the sign is kept,
the chord slope with offsets [0, max(-a l, (1 - a) u)] across 0; any other activation:
``bounds_lie.relax_activation``), and the offset becomes mid + half e_new, with the
midpoint an outward-rounded interval and the half-width rounded up.  Sound in floating point
for the real network; the float32 header's own error is the caller's to add.
"""
from __future__ import annotations

import numpy as np

from .bounds_lie import Form, dense, relax_activation, scaled
from .interval import Interval
from .ir import Activation, Dense, Model
from .passes import canonicalize

_UP = 1.0 + 2.0 ** -40


def preactivation_bounds(model: Model, box: Interval) -> list[Interval]:
    """Enclosures (B, width) of every activation layer's input over each box of ``box`` (B, n)
    for the real network, in layer order (module docstring).  Dense layers and activations only
    (after the header's canonical folding)."""
    batch, n = box.shape
    c = np.clip(box.mid, box.lo, box.hi)
    r = np.maximum(box.hi - c, c - box.lo) * _UP
    value = Form(Interval.point(c), np.broadcast_to(np.eye(n), (batch, n, n)).copy(),
                 Interval.point(np.zeros((batch, n))))
    out: list[Interval] = []
    for layer in canonicalize(model).layers:
        if isinstance(layer, Dense):
            value = dense(value, layer.weight, layer.bias, r)
        elif isinstance(layer, Activation):
            z = value.range(r)
            out.append(z)
            a, b_lo, b_hi = _relu_lines(z) if layer.kind == "relu" else \
                relax_activation(layer.kind, dict(layer.params), z)[0]
            value, r = _with_symbols(scaled(value, a, 0.0, 0.0, r), b_lo, b_hi, r)
        else:
            raise TypeError(f"preactivation_bounds: unsupported layer {type(layer).__name__}")
    return out


def _relu_lines(z: Interval) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a, b_lo, b_hi) with a z + b_lo <= relu(z) <= a z + b_hi on z: exact (a = 1 or 0, no
    offset) where z keeps its sign; across 0 the chord slope a = u / (u - l), which lies in
    [0, 1] in floating point too, so relu(z) - a z >= 0 everywhere, and its maximum over [l, u]
    is at an end: max(-a l, (1 - a) u), rounded up."""
    l, u = z.lo, z.hi
    across = (l < 0) & (u > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(across, u / np.where(across, u - l, 1.0), np.where(l >= 0, 1.0, 0.0))
        high = np.maximum(-a * l, (1.0 - a) * u)
    b_hi = np.where(across, np.nextafter(high * _UP, np.inf), 0.0)
    unbounded = ~(np.isfinite(a) & np.isfinite(b_hi))       # an infinite end: relu(z) in [0, inf)
    return np.where(unbounded, 0.0, a), np.zeros_like(a), np.where(unbounded, np.inf, b_hi)


def _with_symbols(q: Form, b_lo: np.ndarray, b_hi: np.ndarray, r: np.ndarray) -> tuple[Form, np.ndarray]:
    """q + [b_lo, b_hi] (B, K) as q + mid + half e_k, one new symbol e_k in [-1, 1] per column
    (radius 1 appended to ``r``); an infinite offset stays in the remainder."""
    batch, width = b_lo.shape
    finite = np.isfinite(b_lo) & np.isfinite(b_hi)
    lo, hi = np.where(finite, b_lo, 0.0), np.where(finite, b_hi, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        mid = (Interval.point(lo) + Interval.point(hi)) * 0.5
        half = np.nextafter(np.maximum(np.maximum(hi - mid.lo, mid.hi - lo), 0.0) * _UP, np.inf)
    symbols = np.zeros((batch, width, width))
    symbols[:, np.arange(width), np.arange(width)] = half
    rest = q.rest + Interval(np.where(finite, 0.0, b_lo), np.where(finite, 0.0, b_hi), check=False)
    form = Form(q.centre + mid, np.concatenate([q.coef, symbols], axis=1), rest)
    return form.recentred(), np.concatenate([r, np.ones((batch, width))], axis=1)
