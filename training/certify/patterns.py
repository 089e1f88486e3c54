"""ReLU networks over a box: which neurons may change sign, and the float32 header's rounding
of the gradient whatever pattern it takes (``level_pieces.py`` bounds the boundary row piece
by piece from them).

On a box, a ReLU neuron whose pre-activation enclosure (the interval one intersected with the
zonotope's, ``compiler.bounds_zonotope``, widened by the float32 header's own error bound on
it, ``compiler.bounds.enclose(error_trace=...)``) lies above 0 is active, below or at 0
inactive (ReLU'(0) = 0, as the header and PyTorch take it); the rest are unstable.
"""
from __future__ import annotations

import numpy as np

from compiler.bounds import U32, enclose
from compiler.bounds_zonotope import preactivation_bounds
from compiler.interval import Interval, gamma
from compiler.ir import Activation, Dense
from compiler.passes import canonicalize

_UP = 1.0 + 2.0 ** -40    # rounds a short sum of nonnegative float64 terms up


def supported(model) -> bool:
    """Dense, ReLU, Dense, ..., ReLU, Dense (after the header's canonical folding): the networks
    ``level_pieces.py`` bounds piece by piece.  Anything else (another activation, a periodic embedding) keeps the
    interval bound."""
    shape = "".join("D" if isinstance(l, Dense) else "R" if isinstance(l, Activation) and l.kind == "relu" else "?"
                    for l in canonicalize(model).layers)
    return shape.startswith("D") and shape == "D" + "RD" * (len(shape) // 2)


def preactivation_enclosures(model, box: Interval) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[np.ndarray],
                                                            np.ndarray]:
    """(enclosures, errors, e_h) of the canonical ``model`` over ``box``: per ReLU layer, the
    (lo, hi) (B, width) every pre-activation lies in, the real network's and the float32
    header's (the interval enclosure intersected with the zonotope's, ``compiler.bounds_zonotope``,
    widened by the header's error bound on it), and that error bound (B, width); e_h (B,): the
    header's error bound on h."""
    trace, errors = [], []
    jets = enclose(model, box, order=1, float32=True, trace=trace, error_trace=errors)
    tight = iter(preactivation_bounds(model, box))
    enclosures, layer_errors = [], []
    for (layer, a), e in zip(trace, errors):
        if isinstance(layer, Activation):
            z = next(tight)
            a_lo, a_hi = np.maximum(a.lo, z.lo), np.minimum(a.hi, z.hi)
            enclosures.append((np.nextafter(a_lo - e * _UP, -np.inf), np.nextafter(a_hi + e * _UP, np.inf)))
            layer_errors.append(e * _UP)
    return enclosures, layer_errors, np.asarray(jets.rounding.h, dtype=float)


def header_tangent_rounding(model, active: list[np.ndarray], unstable: list[np.ndarray], batch: int) -> np.ndarray:
    """(B, n) bound of the float32 header's rounding of grad h, whatever pattern of the unstable
    neurons it takes (exact 0/1 products): Dense roundings only, forward from the identity
    seeds, magnitudes with every possibly active neuron kept."""
    dense = [l for l in model.layers if isinstance(l, Dense)]
    n = model.input_dim
    t_abs, e_t = np.broadcast_to(np.eye(n), (batch, n, n)), np.zeros((batch, n, n))
    widest = [(act | u).astype(float)[:, None, :] for act, u in zip(active, unstable)] + [None]
    for layer, keep in zip(dense, widest):
        aw = np.abs(layer.weight.T)
        e_t = (e_t @ aw + gamma(layer.in_dim + 2, U32) * ((t_abs + e_t) @ aw)) * _UP
        t_abs = t_abs @ aw
        if keep is not None:
            e_t, t_abs = e_t * keep, t_abs * keep
    return e_t[:, :, 0]


class PieceMaps:
    """The canonical network's Dense layers, as the affine maps of an activation pattern (float64)."""

    def __init__(self, model):
        self.dense = [layer for layer in canonicalize(model).layers if isinstance(layer, Dense)]
        self.n = self.dense[0].in_dim
        self.hidden = sum(layer.out_dim for layer in self.dense[:-1])

    def patterns(self, x: np.ndarray) -> np.ndarray:
        """(K, hidden) bool: active neurons at states x (float64; ReLU'(0) = 0: z = 0 is inactive)."""
        bits = []
        for layer in self.dense[:-1]:
            x = x @ layer.weight.T + layer.bias
            bits.append(x > 0)
            x = np.maximum(x, 0.0)
        return np.concatenate(bits, axis=1)

    def affine(self, pattern: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """(Z (hidden, n), z0 (hidden,), g (n,), c): every pre-activation is Z x + z0 on the
        pattern's region, and h = g . x + c."""
        L, off = np.eye(self.n), np.zeros(self.n)
        rows, offs, start = [], [], 0
        for layer in self.dense[:-1]:
            L, off = layer.weight @ L, layer.weight @ off + layer.bias
            rows.append(L)
            offs.append(off)
            keep = pattern[start:start + layer.out_dim]
            start += layer.out_dim
            L, off = L * keep[:, None], off * keep
        last = self.dense[-1]
        return np.concatenate(rows), np.concatenate(offs), (last.weight @ L)[0], float((last.weight @ off + last.bias)[0])
