"""ReLU activation patterns: the boundary row of a piecewise-linear network, piece by piece.

On a box, a ReLU neuron whose pre-activation enclosure (widened by the float32 header's own
error bound on it, ``compiler.bounds.enclose(error_trace=...)``) lies above 0 is active, below
or at 0 inactive (ReLU'(0) = 0, as the header and PyTorch take it); the rest are unstable.
With k unstable neurons the network is affine on each of at most 2^k pieces of the box, with
the constant gradient g_p = W_L M_p,L-1 W_L-1 ... M_p,1 W_1 (M: the pattern's 0/1 masks).
Every pattern is enumerated, feasible or not, so the gradient at every state of the box, the
real network's and the header's (whose pattern may differ near a ridge), is one of them.

The interval gradient holds the hull of all of them and loses their correlation with F:
grad h(B) . F(B).  Here each g_p is exact (float64 products, their rounding bounded) and
only F = f + G u is an interval, so the bound of the boundary row,

    min over p of max over candidate inputs u of  g_p . F_u(B)  -  (e_t + e_64) . |F_u(B)|,

(e_t: the header's tangent rounding with these masks, e_64: the float64 products') is the
per-piece (generalized) Nagumo condition the certificate claims for ReLU networks, decided
exactly in the gradient.  Boxes with more than MAX_UNSTABLE unstable neurons keep the
interval bound (and are split).
"""
from __future__ import annotations

import numpy as np

from compiler.bounds import U32, enclose
from compiler.bounds_zonotope import preactivation_bounds
from compiler.interval import Interval, gamma
from compiler.ir import Activation, Dense
from compiler.passes import canonicalize

MAX_UNSTABLE = 6          # 64 patterns per box at most
_UP = 1.0 + 2.0 ** -40    # rounds a short sum of nonnegative float64 terms up


def supported(model) -> bool:
    """Dense, ReLU, Dense, ..., ReLU, Dense (after the header's canonical folding): the shape
    ``gradients`` walks.  Anything else (another activation, a periodic embedding) keeps the
    interval bound."""
    shape = "".join("D" if isinstance(l, Dense) else "R" if isinstance(l, Activation) and l.kind == "relu" else "?"
                    for l in canonicalize(model).layers)
    return shape.startswith("D") and shape == "D" + "RD" * (len(shape) // 2)


def neuron_states(model, box: Interval) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(active, unstable) (B, width) per ReLU layer of the canonical ``model`` over ``box``: the
    pre-activation enclosure (the interval one intersected with the zonotope's,
    ``compiler.bounds_zonotope``), widened by the header's error bound on it, above 0 / across it."""
    trace, errors = [], []
    enclose(model, box, order=1, float32=True, trace=trace, error_trace=errors)
    tight = iter(preactivation_bounds(model, box))
    active, unstable = [], []
    for (layer, a), e in zip(trace, errors):
        if isinstance(layer, Activation):
            z = next(tight)
            a_lo, a_hi = np.maximum(a.lo, z.lo), np.minimum(a.hi, z.hi)
            lo, hi = np.nextafter(a_lo - e * _UP, -np.inf), np.nextafter(a_hi + e * _UP, np.inf)
            active.append(lo > 0)
            unstable.append(~active[-1] & (hi > 0))
    return active, unstable


def gradients(model, active: list[np.ndarray], unstable: list[np.ndarray], patterns: int, batch: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gradients (B, P, n), their float64 rounding bound (B, P, n), the header's tangent
    rounding bound (B, n)) of the canonical ``model`` for P = ``patterns`` patterns of each
    box's unstable neurons (bit j of pattern p: the j-th unstable neuron, layer by layer, is
    active; past a box's own 2^k patterns they repeat)."""
    dense = [l for l in model.layers if isinstance(l, Dense)]
    n = model.input_dim
    loose = np.concatenate(unstable, axis=1) if unstable else np.zeros((batch, 0), dtype=bool)
    rank = np.clip(np.cumsum(loose, axis=1) - 1, 0, None)
    bits = (np.arange(patterns)[None, :, None] >> rank[:, None, :]) & 1                    # (B, P, W)
    cuts = np.cumsum([u.shape[1] for u in unstable])[:-1]
    masks = [np.where(u[:, None, :], b, act[:, None, :]).astype(float)
             for u, b, act in zip(unstable, np.split(bits, cuts, axis=2), active)]
    # backward through the layers: v = W_L, then (v * M) @ W for each hidden layer downwards
    v = np.broadcast_to(dense[-1].weight[0], (batch, patterns, dense[-1].in_dim))
    v_abs = np.abs(v)
    depth = dense[-1].in_dim
    for mask, layer in zip(reversed(masks), reversed(dense[:-1])):
        v = (v * mask) @ layer.weight
        v_abs = (v_abs * mask) @ np.abs(layer.weight)
        depth += layer.in_dim
    err64 = gamma(depth + len(dense), 2.0 ** -53) * v_abs * _UP
    # the header's tangents with these masks (exact 0/1 products): Dense roundings only,
    # forward from the identity seeds, magnitudes with every possibly active neuron kept
    t_abs, e_t = np.broadcast_to(np.eye(n), (batch, n, n)), np.zeros((batch, n, n))
    widest = [(act | u).astype(float)[:, None, :] for act, u in zip(active, unstable)] + [None]
    for layer, keep in zip(dense, widest):
        aw = np.abs(layer.weight.T)
        e_t = (e_t @ aw + gamma(layer.in_dim + 2, U32) * ((t_abs + e_t) @ aw)) * _UP
        t_abs = t_abs @ aw
        if keep is not None:
            e_t, t_abs = e_t * keep, t_abs * keep
    return v, err64, e_t[:, :, 0]


def pattern_gradients(model, box: Interval) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``gradients`` with 2^MAX_UNSTABLE patterns for every box of ``box``; the rows of boxes
    with more unstable neurons are NaN."""
    model = canonicalize(model)
    active, unstable = neuron_states(model, box)
    g, err64, e_t = gradients(model, active, unstable, 2 ** MAX_UNSTABLE, box.shape[0])
    too_many = sum((u.sum(axis=1) for u in unstable), np.zeros(box.shape[0])) > MAX_UNSTABLE
    return np.where(too_many[:, None, None], np.nan, g), err64, e_t


def pattern_row(model, box: Interval, f: Interval, G: Interval, candidates: list[np.ndarray]) -> np.ndarray:
    """(B,) lower bound of the boundary row over each box (module docstring): the least, over
    the patterns, of the best candidate input's bound (each (B, m)); -inf where a box has more
    than MAX_UNSTABLE unstable neurons.  ``f`` (B, n), ``G`` (B, n, m): the plant's enclosures.
    Boxes are grouped by their count k of unstable neurons, each group with its 2^k patterns."""
    model = canonicalize(model)
    active, unstable = neuron_states(model, box)
    count = sum((u.sum(axis=1) for u in unstable), np.zeros(box.shape[0], dtype=int))
    out = np.full(box.shape[0], -np.inf)
    for k in np.unique(count[count <= MAX_UNSTABLE]):
        sel = np.flatnonzero(count == k)
        g, err64, e_t = gradients(model, [a[sel] for a in active], [u[sel] for u in unstable], 2 ** int(k), len(sel))
        best = np.full(g.shape[:2], -np.inf)
        for u in candidates:
            F = f[sel] + (G[sel] * Interval.point(u[sel])[:, None, :]).sum(-1)          # (b, n)
            row = (Interval.point(g) * F[:, None, :]).sum(-1)                             # (b, P)
            with np.errstate(invalid="ignore", over="ignore"):
                loss = np.sum((err64 + e_t[:, None, :]) * F.mag[:, None, :], axis=-1) * _UP
                low = np.nextafter(row.lo - loss, -np.inf)
            best = np.maximum(best, np.where(np.isnan(low), -np.inf, low))
        out[sel] = best.min(axis=1)
    return out
