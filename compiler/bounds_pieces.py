"""Affine pieces of a piecewise-linear barrier over boxes (relu, leaky_relu, hardtanh, identity).

``pieces(model, box, max_unstable)`` enumerates, layer by layer, every activation pattern
that may occur in each box: with the patterns of earlier layers fixed, the next
pre-activations are affine in x, so they are bounded tightly over the box and only the
neurons still unstable there are branched on. The result is a superset of the patterns
that really occur, each as an exact affine piece h_S(x) = g_S . x + c_S, computed in float64
with a rigorous bound on the rounding (the real g_S lies in g +- g_err, c_S in c +- c_err).
Where x realises pattern S, h(x) = h_S(x) (with ReLU'(0) = 0 the pattern at a kink point
is the left region's, and h_S is continuous across it).

The data are flat arrays over all pieces of all boxes (``box_index`` says whose), so a
caller can check every piece, or every hinge between two pieces, in one vectorised pass.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .interval import Interval, as_interval, gamma
from .ir import Activation, Dense, Model, validate

_UP = 1.0 + 2.0 ** -40
U64 = 2.0 ** -53


class _Regions:
    """Linear regions of a piecewise-linear activation: y = slope_r z + offset_r on region r
    (ordered along z); region r is the closed interval [kinks[r-1], kinks[r]]."""

    def __init__(self, kinks: list[float], slopes: list[float], offsets: list[float]):
        self.kinks = np.asarray(kinks, dtype=np.float64)
        self.slopes = np.asarray(slopes, dtype=np.float64)
        self.offsets = np.asarray(offsets, dtype=np.float64)

    def span(self, z_lo: np.ndarray, z_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """First and last region the closed interval [z_lo, z_hi] meets (a superset)."""
        first = np.searchsorted(self.kinks, z_lo, side="left")    # kinks strictly below z_lo
        last = np.searchsorted(self.kinks, z_hi, side="right")    # kinks at or below z_hi
        return first, last


def _regions(layer: Activation) -> _Regions:
    p = dict(layer.params)
    if layer.kind == "relu":
        return _Regions([0.0], [0.0, 1.0], [0.0, 0.0])
    if layer.kind == "leaky_relu":
        return _Regions([0.0], [p["negative_slope"], 1.0], [0.0, 0.0])
    if layer.kind == "hardtanh":
        return _Regions([p["min_val"], p["max_val"]], [0.0, 1.0, 0.0], [p["min_val"], 0.0, p["max_val"]])
    if layer.kind == "identity":
        return _Regions([], [1.0], [0.0])
    from .bounds import UnsupportedActivationError
    raise UnsupportedActivationError(
        f"pieces needs a piecewise-linear network (relu, leaky_relu, hardtanh, identity), "
        f"but activation {layer.kind!r} is not")


@dataclass
class Pieces:
    """All pieces of all enumerated boxes, flat (P = total number of pieces)."""
    box_index: np.ndarray      # (P,) which box the piece belongs to
    g: np.ndarray              # (P, n) gradient of the piece (float64)
    c: np.ndarray              # (P,) offset
    g_err: np.ndarray          # (P, n) the real gradient lies in g +- g_err
    c_err: np.ndarray          # (P,)  the real offset lies in c +- c_err
    pattern: np.ndarray        # (P, hidden) region per hidden neuron (0 = lowest along z)
    branched: np.ndarray       # (P, hidden) True where the neuron was unstable in the box
    enumerated: np.ndarray     # (B,) False where the box had more than max_unstable unstable neurons
    unstable: np.ndarray       # (B,) unstable neurons met (the largest count along any branch)
    cuts: "RegionCuts | None" = None   # the piece's region, where asked for (``pieces(..., cuts=True)``)

    @property
    def g_interval(self) -> Interval:
        return Interval(np.nextafter(self.g - self.g_err, -np.inf), np.nextafter(self.g + self.g_err, np.inf))

    @property
    def c_interval(self) -> Interval:
        return Interval(np.nextafter(self.c - self.c_err, -np.inf), np.nextafter(self.c + self.c_err, np.inf))

    def value(self, x: np.ndarray) -> Interval:
        """h_S(x) for each piece at the state x[p] (P, n), rigorously (an Interval (P,))."""
        return (self.g_interval * as_interval(x)).sum(axis=1) + self.c_interval


@dataclass
class RegionCuts:
    """The region of each piece in its box, as the branched neurons' pre-activations: on piece p,
    slot k holds z = A x + c (the real A, c within eA, ec) with lo - slack <= z <= hi + slack
    (``slack``: the ``widen`` of ``pieces``, so the states where a computation within it takes the
    pattern are inside too).  Unused slots have A = 0, c = 0, lo = -inf, hi = +inf."""
    A: np.ndarray              # (P, K, n)
    c: np.ndarray              # (P, K)
    eA: np.ndarray             # (P, K, n)
    ec: np.ndarray             # (P, K)
    slack: np.ndarray          # (P, K)
    lo: np.ndarray             # (P, K)
    hi: np.ndarray             # (P, K)

    def take(self, idx: np.ndarray) -> "RegionCuts":
        """The cuts of the pieces ``idx`` (rows repeated as ``idx`` repeats them)."""
        return RegionCuts(*(getattr(self, name)[idx] for name in RegionCuts.__dataclass_fields__))


def _empty_cuts(count: int, slots: int, n: int) -> RegionCuts:
    zeros = np.zeros((count, slots))
    return RegionCuts(np.zeros((count, slots, n)), zeros.copy(), np.zeros((count, slots, n)), zeros.copy(),
                      zeros.copy(), np.full((count, slots), -np.inf), np.full((count, slots), np.inf))


def _add_cuts(cuts: RegionCuts, parent: np.ndarray, region: np.ndarray, split: np.ndarray, filled: np.ndarray,
              A, c, eA, ec, slack, kinks: np.ndarray) -> RegionCuts:
    """The children's cuts: the parents' and, in the next free slots, each neuron branched here
    (``split`` (children, w)) bounded to its region's kinks."""
    cuts = cuts.take(parent)
    child, neuron = np.nonzero(split)
    slot = filled[child] + (np.cumsum(split, axis=1) - 1)[child, neuron]
    r = region[child, neuron]
    bounds = np.concatenate([[-np.inf], kinks, [np.inf]])
    cuts.A[child, slot], cuts.eA[child, slot] = A[parent[child], neuron], eA[parent[child], neuron]
    cuts.c[child, slot], cuts.ec[child, slot] = c[parent[child], neuron], ec[parent[child], neuron]
    cuts.slack[child, slot] = slack[child, neuron]
    cuts.lo[child, slot], cuts.hi[child, slot] = bounds[r], bounds[r + 1]
    return cuts


def _affine_bounds(A, c, eA, ec, xc, xr):
    """Enclosure of z = A x + c over the box (centre xc, radius xr), A, c known within eA, ec."""
    n = A.shape[-1]
    g = gamma(n + 1)
    absA = np.abs(A)
    centre = (A @ xc[:, :, None])[:, :, 0] + c
    # |A| (xr + g |xc|) + eA (|xc| + xr): the sums of nonnegative terms round within the 4g slack
    radius = ((absA @ (xr + g * np.abs(xc))[:, :, None])[:, :, 0] + (eA @ (np.abs(xc) + xr)[:, :, None])[:, :, 0]
              + ec + g * np.abs(c)) * _UP * (1 + 4 * g) + 1e-300
    return np.nextafter(centre - radius, -np.inf), np.nextafter(centre + radius, np.inf)


def _expand(first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every region choice per partial pattern: (parent index per child, region (children, w))."""
    count = last - first + 1                                     # (P, w) choices per neuron
    radix = np.cumprod(np.concatenate([np.ones((count.shape[0], 1), dtype=np.int64), count[:, :-1]], axis=1),
                       axis=1)
    children = np.prod(count, axis=1)
    parent = np.repeat(np.arange(count.shape[0]), children)
    local = np.arange(parent.size) - np.repeat(np.cumsum(children) - children, children)
    region = first[parent] + (local[:, None] // radix[parent]) % count[parent]
    return parent, region


def pieces(model: Model, box, max_unstable: int = 10, widen: list | None = None,
           clamp: list | None = None, cuts: bool = False) -> Pieces:
    """Every activation pattern that may occur in each box, as exact affine pieces.

    ``widen`` (per activation layer, (B, width) >= 0): slack added to each piece's bound on the
    layer's pre-activations before branching, so a pattern is kept wherever a computation within
    that distance of the piece's affine value could take it (the float32 header's own pattern:
    its pre-activations lie within its error bound of the piece's, ``training/certify/level_pieces``).
    ``clamp`` (per activation layer, (lo, hi) each (B, width)): an enclosure every such computation
    lies in over the box (interval or zonotope bounds, so widened too); the piece's bound is
    intersected with it, and a piece whose bound becomes empty is dropped.  ``cuts``: also
    return each piece's region (``RegionCuts``), for bounds restricted to it."""
    validate(model, canonical=True)
    if model.embedding is not None:
        from .bounds import UnsupportedActivationError
        raise UnsupportedActivationError("pieces needs a piecewise-linear network, but the periodic input embedding "
                                         "(sin, cos) is not affine; use enclose")
    layers = model.layers
    regions = [_regions(layer) for layer in layers if isinstance(layer, Activation)]
    box = as_interval(box)
    if box.ndim != 2 or box.shape[1] != model.input_dim:
        raise ValueError(f"box must have shape (B, {model.input_dim}), got {box.shape}")
    batch, n = box.shape
    xc_all, xr_all = box.mid, box.rad
    first_dense: Dense = layers[0]
    box_index = np.arange(batch)
    A = np.broadcast_to(first_dense.weight, (batch, *first_dense.weight.shape)).copy()
    c = np.broadcast_to(first_dense.bias, (batch, first_dense.out_dim)).copy()
    eA, ec = np.zeros_like(A), np.zeros_like(c)
    pattern = np.zeros((batch, 0), dtype=np.int8)
    branched = np.zeros((batch, 0), dtype=bool)
    counts = np.zeros(batch, dtype=np.int64)
    unstable = np.zeros(batch, dtype=np.int64)
    enumerated = np.ones(batch, dtype=bool)
    region_cuts = _empty_cuts(batch, max_unstable, n) if cuts else None
    dense_layers = [layer for layer in layers if isinstance(layer, Dense)]
    for layer_no, (act_regions, dense) in enumerate(zip(regions, dense_layers[1:])):
        xc, xr = xc_all[box_index], xr_all[box_index]
        z_lo, z_hi = _affine_bounds(A, c, eA, ec, xc, xr)
        if widen is not None:
            slack = widen[layer_no][box_index]
            z_lo, z_hi = np.nextafter(z_lo - slack, -np.inf), np.nextafter(z_hi + slack, np.inf)
        if clamp is not None:
            z_lo = np.maximum(z_lo, clamp[layer_no][0][box_index])
            z_hi = np.minimum(z_hi, clamp[layer_no][1][box_index])
        first, last = act_regions.span(z_lo, z_hi)
        last = np.where(z_lo > z_hi, first - 1, last)             # an empty bound: no region, the piece goes
        filled = counts
        counts = counts + np.sum(last > first, axis=1)
        np.maximum.at(unstable, box_index, counts)
        enumerated &= unstable <= max_unstable
        keep = enumerated[box_index]
        if not np.all(keep):
            box_index, A, c, eA, ec, first, last, counts, filled = (
                v[keep] for v in (box_index, A, c, eA, ec, first, last, counts, filled))
            pattern, branched = pattern[keep], branched[keep]
            if cuts:
                region_cuts = region_cuts.take(keep)
        parent, region = _expand(first, last)
        if cuts:
            slack = np.zeros_like(c) if widen is None else widen[layer_no][box_index]
            region_cuts = _add_cuts(region_cuts, parent, region, (last > first)[parent], filled[parent], A, c, eA, ec,
                                    slack[parent], act_regions.kinks)
        slope, offset = act_regions.slopes[region], act_regions.offsets[region]
        box_index, counts = box_index[parent], counts[parent]
        pattern = np.concatenate([pattern[parent], region.astype(np.int8)], axis=1)
        branched = np.concatenate([branched[parent], (last > first)[parent]], axis=1)
        # y = slope z + offset, then the next Dense: A' = W diag(slope) A, c' = W (slope c + offset) + b
        Ay, cy = slope[:, :, None] * A[parent], slope * c[parent] + offset
        eAy = np.abs(slope)[:, :, None] * eA[parent] + U64 * np.abs(Ay)
        ecy = np.abs(slope) * ec[parent] + U64 * (np.abs(slope * c[parent]) + np.abs(cy))
        W, absW = dense.weight, np.abs(dense.weight)
        g = gamma(dense.in_dim + 1)
        A = W @ Ay
        c = cy @ W.T + dense.bias
        eA = (absW @ (eAy + g * np.abs(Ay))) * _UP
        ec = (ecy @ absW.T + g * (np.abs(cy) @ absW.T + np.abs(dense.bias))) * _UP
    return Pieces(box_index, A[:, 0, :], c[:, 0], eA[:, 0, :] * _UP + 1e-300, ec[:, 0] * _UP + 1e-300,
                  pattern, branched, enumerated, unstable, region_cuts)
