"""The tube filter's rows: the CBF condition held over a whole control period, on every linear
piece of a ReLU barrier that the period can reach.

Why: the one-row filter enforces L_f h + L_G h u >= -gamma h with the gradient of the piece
x_k lies on.  A held input can carry the state across a kink within the period, onto a piece
whose gradient disagrees, and the gradient jumps by the same amount however short the period
(every ReLU row's 10 ms column was refuted this way).  This filter enforces the condition on
every piece the period can reach, over the states it can reach:

  1. Tube.  Y = x + [-r, r] (r fixed per problem, ``tube_spec``).  If T F(Y) lies in [-r, r],
     with F(Y) the interval enclosure of f + G u over Y and the input box, every solution from
     x under any held u stays in Y for T, so R = x + [0, T] F(Y) encloses it (one Picard step).
  2. Pieces.  Interval bound propagation over R gives every ReLU neuron's pre-activation range.
     A neuron whose range lies above 0 (below) is linear (zero) on all of R.  Each sign
     combination of the others is one affine piece g_p . x + c_p, and on R the network equals
     one of them wherever it is differentiable.  The first MAX_UNSTABLE of them in one fixed
     order (``_priority``) are enumerated; the rest keep the slope interval [0, 1], so each
     row's gradient interval holds the gradients of all the pieces its combination allows.
     Each combination's box is R cut by the half-spaces of the signs it fixes (its
     pre-activations are affine in x there); a combination whose box empties is dropped
     (``tube_enumeration``: one neuron more per level, so an empty prefix is never extended).
  3. Rows.  For each combination, a_p + b_p . u >= DELTA with a_p a lower bound of g . f over
     its box and the gradient interval, plus gamma h_lo(x_k), and b_p . u a lower bound of
     g . G u (mid and radius).

Then along the period d/dt h(x(t)) >= -gamma h(x_k) almost everywhere (h is piecewise affine
and Lipschitz, so d/dt h(x(t)) is g_p . x' for a piece p of R at x(t)), and
h(x(t)) >= h(x_k) (1 - gamma t) >= 0 for gamma T <= 1: the held input keeps the set.  No margin
has to pay for the drift; the rows carry it.

The certifier (``training/certify/tube_condition.py``) proves that on every sampled state of
the set these rows are feasible.  It evaluates the same functions over a box B of states:
everything here is an outward-rounded interval function of its box, inclusion-monotone up to
its own rounding, and ``cushion=True`` widens each step by a bound of that rounding, so the
certifier's rows lie below the filter's at every x in B.  For the enumerated neurons this
needs the fixed order: the filter's unstable neurons at x are a subset of B's, so B's first k
among them are also among x's first k, and each filter row's combination is one of B's.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from compiler.errors import CbfsimError
from compiler.interval import Interval, gamma as rounding_gamma
from compiler.ir import Activation, Dense
from compiler.passes import canonicalize

U64 = 2.0 ** -53
_UP = 1.0 + 2.0 ** -40       # rounds a short float64 product or sum of nonnegative terms up
DELTA = 1e-7                 # the filter enforces every row with this margin (units of h per second)
CUSHION = 2.0 ** -30         # the certifier's relative widening of the tube and of f, G over it
MAX_UNSTABLE = 10            # neurons unstable over a tube; beyond, 2^k rows would be too many
PROPAGATION_ROUNDS = 2       # passes of the combinations' sign cuts over their boxes (``_tighten``)


class TubeRowsError(CbfsimError, ValueError):
    """The network or the problem is outside what the tube filter supports (one line)."""


@dataclass(frozen=True)
class TubeSpec:
    """What the rows depend on besides the state: the period, the input box, gamma (the
    linear class-K gain), the tube radius r (n,) and the cap on unstable neurons."""
    T: float
    u_lo: np.ndarray
    u_hi: np.ndarray
    gamma: float
    radius: np.ndarray
    max_unstable: int = MAX_UNSTABLE

    @property
    def u_extent(self) -> np.ndarray:
        return np.maximum(np.abs(self.u_lo), np.abs(self.u_hi))


@dataclass
class Rows:
    """One box's rows a (P,) + b (P, m) . u >= 0, before the filter's DELTA."""
    a: np.ndarray
    b: np.ndarray


def _field(plant, box: Interval, spec: TubeSpec) -> Interval:
    from training.reach import vector_field
    return vector_field(plant, box, Interval(np.asarray(spec.u_lo, float), np.asarray(spec.u_hi, float)))


def tube_spec(plant, lo, hi, u_lo, u_hi, T: float, gamma: float, max_unstable: int = MAX_UNSTABLE) -> TubeSpec:
    """The spec for states in the domain [lo, hi]: r grows until T F(D + [-r, r]) fits in
    [-r, r] / 2, so the filter's check passes with room at every state of D."""
    T, gamma = float(T), float(gamma)
    if not (np.isfinite(T) and T > 0):
        raise TubeRowsError(f"the tube filter holds the input over a period: it needs dt > 0, got {T:g}")
    if not (np.isfinite(gamma) and 0 <= gamma * T <= 1):
        raise TubeRowsError(f"the tube filter needs a linear class-K gain with 0 <= gamma dt <= 1, got "
                            f"gamma {gamma:g}, dt {T:g}")
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    spec = TubeSpec(T, np.asarray(u_lo, float), np.asarray(u_hi, float), gamma, np.zeros(len(lo)), int(max_unstable))
    domain = Interval(lo[None], hi[None])
    F = _field(plant, domain, spec)
    r = 2.0 * T * np.maximum(np.abs(F.lo[0]), np.abs(F.hi[0])) + 1e-12 * (1.0 + np.abs(lo) + np.abs(hi))
    for _ in range(60):
        F = _field(plant, domain + Interval(-r, r), spec)
        need = T * np.maximum(np.abs(F.lo[0]), np.abs(F.hi[0]))
        if np.all(np.isfinite(need)) and np.all(need <= 0.5 * r):
            return TubeSpec(T, spec.u_lo, spec.u_hi, gamma, r, int(max_unstable))
        r = np.where(np.isfinite(need), np.maximum(r, 2.0 * need), 2.0 * r)
    raise TubeRowsError("no tube radius closes over the domain (the vector field grows too fast for dt)")


def tube(plant, X: Interval, spec: TubeSpec, cushion: bool = False) -> tuple[Interval, np.ndarray]:
    """(R (B, n), ok (B,)): R encloses every state reachable from X within T where ok.  With
    ``cushion`` (the certifier), R is widened and ok asks for room, so both contain what the
    filter computes for any state of X."""
    r = spec.radius
    F = _field(plant, X + Interval(-r, r), spec)
    reach = Interval(0.0, spec.T) * F
    room = r * (1.0 - CUSHION) if cushion else r
    ok = np.all((reach.lo >= -room) & (reach.hi <= room), axis=1) & np.all(np.isfinite(F.lo) & np.isfinite(F.hi), axis=1)
    R = X + reach
    if cushion:
        pad = CUSHION * np.maximum(np.abs(R.lo), np.abs(R.hi)) + 1e-300
        R = Interval(R.lo - pad, R.hi + pad)
    return R, ok


class PieceNet:
    """A ReLU network (Dense, ReLU, ..., Dense after canonical folding) as its dense layers."""

    def __init__(self, model):
        layers = canonicalize(model).layers
        shape = "".join("D" if isinstance(l, Dense) else "R" if isinstance(l, Activation) and l.kind == "relu"
                        else "?" for l in layers)
        if shape != "D" + "RD" * (len(shape) // 2) or shape == "D":
            bad = next((l for l in layers if not isinstance(l, (Dense, Activation))
                        or isinstance(l, Activation) and l.kind != "relu"), None)
            what = f"layer {getattr(bad, 'kind', type(bad).__name__)}" if bad is not None else "no hidden layer"
            raise TubeRowsError(f"the tube filter needs a ReLU network (Dense, ReLU, ..., Dense); this one has {what}")
        self.dense = [l for l in layers if isinstance(l, Dense)]
        self.n = self.dense[0].in_dim
        self.widths = [l.out_dim for l in self.dense[:-1]]
        self._rank = self._priority()

    def bounds(self, X: Interval, cushion: bool = False) -> tuple[list[tuple[np.ndarray, np.ndarray]], Interval, np.ndarray]:
        """(pre-activation ranges per hidden layer (lo, hi) (B, width), h (B,), spread (B,)):
        interval bound propagation with every dot product's rounding bounded (Higham), so each
        range encloses the exact propagation of its input ranges.  ``spread``: how far h's
        lower end can lie below h at a point from rounding alone (the certifier's floor for
        states of the set).  ``cushion`` widens every range by twice its rounding bound: then
        it contains the ranges computed for any sub-box (each is within that bound of exact)."""
        lo, hi = X.lo, X.hi
        ranges = []
        spread = np.zeros_like(lo)          # (B, width): the rounding-only width at a point
        for k, layer in enumerate(self.dense):
            W, b = layer.weight, layer.bias
            Wp, Wn = np.maximum(W, 0.0), np.minimum(W, 0.0)
            zlo = lo @ Wp.T + hi @ Wn.T + b
            zhi = hi @ Wp.T + lo @ Wn.T + b
            mag = np.maximum(np.abs(lo), np.abs(hi)) @ np.abs(W).T + np.abs(b)
            err = rounding_gamma(layer.in_dim + 2, U64) * mag * _UP * _UP
            spread = (spread @ np.abs(W).T + 2.0 * err) * _UP
            if cushion:
                err = 3.0 * err
            zlo, zhi = np.nextafter(zlo - err, -np.inf), np.nextafter(zhi + err, np.inf)
            if k < len(self.dense) - 1:
                ranges.append((zlo, zhi))
                lo, hi = np.maximum(zlo, 0.0), np.maximum(zhi, 0.0)
        return ranges, Interval(zlo[:, 0], zhi[:, 0]), spread[:, 0]

    def _priority(self) -> list[np.ndarray]:
        """Per hidden layer, each neuron's rank (0 first) in one fixed order for the whole
        network: by how much flipping it can move the gradient (|W| paths into it, times out
        of it).  A fixed order makes the neurons enumerated at a state a superset of those a
        box around it enumerates among the state's own unstable neurons (module docstring)."""
        into, scores = None, []
        for layer in self.dense[:-1]:
            into = np.abs(layer.weight) if into is None else np.abs(layer.weight) @ into
            scores.append(np.linalg.norm(into, axis=1))
        out = np.ones((1, 1))
        for k in range(len(self.dense) - 1, 0, -1):
            out = out @ np.abs(self.dense[k].weight)
            scores[k - 1] = scores[k - 1] * out[0]
        flat = np.concatenate(scores)
        order = np.lexsort((np.arange(len(flat)), -flat))
        rank = np.empty(len(flat), dtype=int)
        rank[order] = np.arange(len(flat))
        return np.split(rank, np.cumsum(self.widths)[:-1])

    def gradients(self, ranges: list[tuple[np.ndarray, np.ndarray]], i: int, enumerate_at_most: int,
                  cushion: bool = False, tube_box: tuple[np.ndarray, np.ndarray] | None = None
                  ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
        """(g (P, n), e (P, n), boxes): box i's gradient intervals [g - e, g + e], one per sign
        combination of its ``enumerate_at_most`` first unstable neurons (``_priority``), the
        other unstable neurons' slopes taken as [0, 1]: with all of them enumerated, each row
        is one linear piece; with none, one row holds every piece.  Interval products with
        their rounding bounded (``cushion``: widened to contain the filter's at any sub-box).

        With ``tube_box`` (lo, hi) (n,), each combination also gets the part of the box its
        pieces can lie in (``boxes``, (P, n) each), and is dropped when that is empty: under it
        every pre-activation is an affine function of x (an interval one, over the slopes left
        [0, 1]), so each sign it fixes (stable or enumerated) is a half-space that cuts the
        box (bound propagation, ``_tighten``; IBP alone cannot see these past the first
        layer).  The cuts are inclusion-monotone, so a state's boxes lie in its box's."""
        one = None if tube_box is None else (tube_box[0][None], tube_box[1][None])
        g, e, boxes, _ = self.combinations([(lo[i:i + 1], hi[i:i + 1]) for lo, hi in ranges], enumerate_at_most,
                                           cushion, one)
        return g, e, boxes

    def combinations(self, ranges: list[tuple[np.ndarray, np.ndarray]], enumerate_at_most: int,
                     cushion: bool = False, tubes: tuple[np.ndarray, np.ndarray] | None = None,
                     chunk: int = 4096) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None,
                                                 np.ndarray]:
        """``gradients`` for every box of ``ranges`` (B boxes) at once: (g, e, boxes, owner),
        the rows of all boxes stacked box after box, ``owner`` (P,) the box of each row.
        ``tubes`` (lo, hi) (B, n) each.  Enumerated level by level, the empty combinations
        dropped as they appear (``training/tube_enumeration.py``), chained in chunks of
        ``chunk`` rows."""
        from training.tube_enumeration import Enumeration
        enum = Enumeration(self, ranges, enumerate_at_most, cushion, tubes, chunk)
        done = []
        while True:
            g, e, boxes, owner = enum.rows()
            end = enum.count[owner] == enum.level          # boxes enumerated to their last neuron
            done.append((g[end], e[end], None if boxes is None else (boxes[0][end], boxes[1][end]), owner[end]))
            if not (enum.count > enum.level).any():
                break
            enum.advance()
        owner = np.concatenate([d[3] for d in done])
        order = np.argsort(owner, kind="stable")
        g, e = np.concatenate([d[0] for d in done])[order], np.concatenate([d[1] for d in done])[order]
        boxes = None if tubes is None else (np.concatenate([d[2][0] for d in done])[order],
                                            np.concatenate([d[2][1] for d in done])[order])
        return g, e, boxes, owner[order]

    def interval_rows(self, plant, t: "Tubes", spec: TubeSpec) -> tuple[Rows, np.ndarray]:
        """``rows_over(..., 0)`` for every box at once: (Rows with a (B,), b (B, m), ok (B,)
        where the tube closed)."""
        from training.certify.terms import plant_terms
        g, e, boxes, kept = self.interval_gradients(t.ranges, t.R, t.cushion)
        boxes = (np.where(kept[:, None], boxes[0], t.R.lo), np.where(kept[:, None], boxes[1], t.R.hi))
        part = plant_terms(plant, Interval(boxes[0], boxes[1]), 1)
        f, G = (_widen(part.f), _widen(part.G)) if t.cushion else (part.f, part.G)
        return _rows(g, e, f, G, spec.gamma * t.h_lo, spec.u_extent, t.cushion), t.ok

    def interval_gradients(self, ranges: list[tuple[np.ndarray, np.ndarray]], tubes: Interval, cushion: bool = False
                           ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray]:
        """``gradients`` with no neuron enumerated, for every box at once: (g, e, boxes, kept),
        one row per box (B, n), the tube cut by the stable signs."""
        m = [(lo >= 0).astype(float) for lo, _ in ranges]
        m_hi = [np.where((lo < 0) & (hi > 0), 1.0, mk) for (lo, hi), mk in zip(ranges, m)]
        return self._chain(m, m_hi, (tubes.lo.copy(), tubes.hi.copy()), cushion, np.zeros(self.widths[0], dtype=bool))

    def _chain(self, m_lo: list[np.ndarray], m_hi: list[np.ndarray], boxes: tuple[np.ndarray, np.ndarray] | None,
               cushion: bool, first_free: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                tuple[np.ndarray, np.ndarray] | None, np.ndarray]:
        """Rows' gradient intervals (g, e) (P, n) for slope masks [m_lo, m_hi] per hidden layer
        (P, width), each row's box cut by the signs its masks fix (``boxes``, (P, n) each, or
        None), and which rows' boxes are not empty.  Of the first layer only the neurons
        ``first_free`` (unstable over the tube) cut: the others' signs hold on all of it."""
        P = m_lo[0].shape[0]
        scale = 3.0 if cushion else 1.0
        first = self.dense[0]
        J = (np.broadcast_to(first.weight, (P,) + first.weight.shape),) * 2       # d z / d x, exact
        off = (np.broadcast_to(first.bias, (P, first.out_dim)),) * 2              # z at x = 0, exact
        signs = []                  # per hidden layer: (A lo, A hi, c hi, fixed) of "A x + c >= 0 somewhere"
        for k, layer in enumerate(self.dense[1:], start=1):
            ml, mh = m_lo[k - 1], m_hi[k - 1]
            active, inactive = ml == 1, mh == 0
            a_lo = np.where(active[:, :, None], J[0], -J[1])
            a_hi = np.where(active[:, :, None], J[1], -J[0])
            fixed = active | inactive
            signs.append((a_lo, a_hi, np.where(active, off[1], -off[0]), fixed & first_free if k == 1 else fixed))
            J = _masked(J, ml[:, :, None], mh[:, :, None])
            off = _masked(off, ml, mh)
            J = _matmul(layer.weight, J, scale)
            off = _matmul(layer.weight, off, scale, layer.bias)
        keep = np.ones(P, dtype=bool)
        if boxes is not None:
            for _ in range(PROPAGATION_ROUNDS):
                for a_lo, a_hi, c_hi, fixed in signs:
                    boxes = _tighten(boxes, a_lo, a_hi, c_hi, fixed, scale)
            keep = np.all(boxes[0] <= boxes[1], axis=1)
        lo, hi = J[0][:, 0, :], J[1][:, 0, :]
        mid = 0.5 * (lo + hi)
        return mid, np.maximum(mid - lo, hi - mid) * _UP, boxes, keep

    @staticmethod
    def unstable(ranges: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        """(B,) how many neurons may change sign over each box."""
        return sum(((lo < 0) & (hi > 0)).sum(axis=1) for lo, hi in ranges)

    def tubes(self, plant, X: Interval, spec: TubeSpec, cushion: bool = False, in_set: bool = False) -> "Tubes":
        """What every set of rows of the boxes X builds on (``Tubes``), computed once.
        ``cushion``: the certifier's, below what the filter computes at any state of X;
        ``in_set``: only X's states with h >= 0 are asked about, so gamma h_lo is floored at
        the rounding spread (no box-width penalty)."""
        R, ok = tube(plant, X, spec, cushion)
        ranges, _, _ = self.bounds(R, cushion)
        _, h, spread = self.bounds(X, cushion)
        return Tubes(R, ok, ranges, np.maximum(h.lo, -spread) if in_set else h.lo, self.unstable(ranges), cushion)

    def rows(self, plant, X: Interval, spec: TubeSpec, cushion: bool = False, in_set: bool = False,
             interval: bool = False) -> tuple[list[Rows | None], np.ndarray]:
        """(rows per box, None where the tube did not close; the unstable count per box): one
        row per sign combination of the first MAX_UNSTABLE unstable neurons (``gradients``),
        or with ``interval`` the one row of the interval gradient, which lies below all of
        them, so it alone proves feasibility.  ``cushion``, ``in_set``: as ``tubes``."""
        t = self.tubes(plant, X, spec, cushion, in_set)
        return self.rows_over(plant, t, spec, 0 if interval else spec.max_unstable), t.count

    def rows_over(self, plant, t: "Tubes", spec: TubeSpec, enumerate_at_most: int) -> list[Rows | None]:
        """The rows of each of ``t``'s boxes with ``enumerate_at_most`` neurons enumerated."""
        out: list[Rows | None] = [None] * len(t.ok)
        done = np.flatnonzero(t.ok)
        if not len(done):
            return out
        g, e, boxes, owner = self.combinations([(lo[done], hi[done]) for lo, hi in t.ranges], enumerate_at_most,
                                               t.cushion, (t.R.lo[done], t.R.hi[done]))
        for i, r in zip(done, self.rows_of(plant, g, e, boxes, owner, t.take(done), spec)):
            out[i] = r
        return out

    @staticmethod
    def rows_of(plant, g: np.ndarray, e: np.ndarray, boxes: tuple[np.ndarray, np.ndarray], owner: np.ndarray,
                t: "Tubes", spec: TubeSpec) -> list[Rows]:
        """Each of ``t``'s boxes' rows from its combinations' gradient intervals and boxes
        (``combinations``; ``owner`` indexes ``t``, every box owning at least one)."""
        from training.certify.terms import plant_terms
        # f and G over each combination's own part of the tube, every box's at once
        terms = plant_terms(plant, Interval(boxes[0], boxes[1]), 1)
        f, G = (_widen(terms.f), _widen(terms.G)) if t.cushion else (terms.f, terms.G)
        rows = _rows(g, e, f, G, spec.gamma * t.h_lo[owner], spec.u_extent, t.cushion)
        starts = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=len(t.ok)))])
        return [Rows(rows.a[starts[k]:starts[k + 1]], rows.b[starts[k]:starts[k + 1]]) for k in range(len(t.ok))]


@dataclass
class Tubes:
    """Boxes' tubes R (B, n) and whether each closed (ok), the pre-activation ranges over them,
    h_lo at the boxes' states and the unstable counts; ``cushion``: the certifier's."""
    R: Interval
    ok: np.ndarray
    ranges: list[tuple[np.ndarray, np.ndarray]]
    h_lo: np.ndarray
    count: np.ndarray
    cushion: bool

    def take(self, idx: np.ndarray) -> "Tubes":
        return Tubes(self.R[idx], self.ok[idx], [(lo[idx], hi[idx]) for lo, hi in self.ranges], self.h_lo[idx],
                     self.count[idx], self.cushion)


def _tighten(boxes: tuple[np.ndarray, np.ndarray], a_lo: np.ndarray, a_hi: np.ndarray, c_hi: np.ndarray,
             fixed: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Each combination's box (P, n) cut by its constraints  max over A in [a_lo, a_hi] of A x
    + c_hi >= 0  (P, h, n), one coordinate at a time where A's sign is fixed: with need = -c_hi
    - the others' largest contribution, phi(x_i) = max(a_lo x_i, a_hi x_i) >= need bounds x_i
    (phi is monotone).  Rounding always loosens a cut (``scale`` 3: the certifier's cushion)."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):   # an emptied box (lo = inf) stays empty
        return _cut(boxes, a_lo, a_hi, c_hi, fixed, scale)


def _cut(boxes, a_lo, a_hi, c_hi, fixed, scale):
    lo, hi = boxes
    cols = np.flatnonzero(fixed.any(axis=0))          # neurons no row fixes cut nothing
    if not len(cols):
        return lo, hi
    if len(cols) < fixed.shape[1]:
        a_lo, a_hi, c_hi, fixed = a_lo[:, cols], a_hi[:, cols], c_hi[:, cols], fixed[:, cols]
    l3, h3 = lo[:, None, :], hi[:, None, :]
    part = np.maximum(np.maximum(a_lo * l3, a_lo * h3), np.maximum(a_hi * l3, a_hi * h3))   # (P, h, n)
    part = np.where(fixed[:, :, None], part, 0.0)
    total = part.sum(-1)
    err = rounding_gamma(lo.shape[1] + 2, U64) * (np.abs(part).sum(-1) + np.abs(c_hi)) * _UP * scale
    need = -c_hi[:, :, None] - (total[:, :, None] - part) - err[:, :, None]         # (P, h, n), low side
    need = need - np.abs(need) * (4 * U64 * scale)
    rising = need >= 0
    up = fixed[:, :, None] & (a_lo > 0)              # phi increasing: x_i >= phi^-1(need)
    low_cut = need / np.where(rising, a_hi, a_lo)
    low_cut = np.where(up, low_cut - np.abs(low_cut) * (4 * U64 * scale) - 1e-300, -np.inf)
    down = fixed[:, :, None] & (a_hi < 0)            # phi decreasing: x_i <= phi^-1(need)
    high_cut = need / np.where(rising, a_lo, a_hi)
    high_cut = np.where(down, high_cut + np.abs(high_cut) * (4 * U64 * scale) + 1e-300, np.inf)
    empty = np.any(fixed & (total + c_hi + err < 0), axis=1)    # a sign no state of the box has
    empty |= ~np.all(lo <= hi, axis=1)                            # emptied before: stays empty
    new_lo = np.fmax(lo, np.fmax.reduce(low_cut, axis=1))        # fmax: a nan cut (0/0, inf/inf) cuts nothing
    new_lo = np.where(empty[:, None], np.inf, new_lo)
    new_hi = np.fmin(hi, np.fmin.reduce(high_cut, axis=1))
    if scale > 1.0:                                  # the certifier's cut: a little looser still
        pad = CUSHION * (np.abs(new_lo) + np.abs(new_hi)) + 1e-300
        new_lo, new_hi = np.maximum(lo, new_lo - pad), np.minimum(hi, new_hi + pad)
        new_lo = np.where(empty[:, None], np.inf, new_lo)
    return new_lo, new_hi


def _masked(x: tuple[np.ndarray, np.ndarray], ml: np.ndarray, mh: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An interval times a 0/1 mask, or times [0, 1] where ml = 0 and mh = 1 (exact)."""
    lo, hi = x
    return (np.where(mh == 0, 0.0, np.where(ml == 1, lo, np.minimum(lo, 0.0))),
            np.where(mh == 0, 0.0, np.where(ml == 1, hi, np.maximum(hi, 0.0))))


def _matmul(W: np.ndarray, x: tuple[np.ndarray, np.ndarray], scale: float, bias: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """W @ x (+ bias) over x's middle axis (P, width, ...) for an interval x, its rounding
    bounded (Higham), times ``scale`` (3 for the certifier's cushion)."""
    lo, hi = x
    Wp, Wn = np.maximum(W, 0.0), np.minimum(W, 0.0)
    if lo.ndim == 2:                       # (P, width): rows
        def mm(A, v):
            return v @ A.T
    else:                                  # (P, width, n): stacked matrices
        def mm(A, v):
            return np.matmul(A, v)
    mag = mm(np.abs(W), np.maximum(np.abs(lo), np.abs(hi)))
    out_lo = mm(Wp, lo) + mm(Wn, hi)
    out_hi = mm(Wp, hi) + mm(Wn, lo)
    if bias is not None:
        out_lo, out_hi = out_lo + bias, out_hi + bias
        mag = mag + np.abs(bias)
    err = rounding_gamma(W.shape[1] + 2, U64) * mag * _UP * _UP * scale
    return np.nextafter(out_lo - err, -np.inf), np.nextafter(out_hi + err, np.inf)


def _dot(gl: np.ndarray, gh: np.ndarray, fl: np.ndarray, fh: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Enclosure of sum over the last axis of g f for g in [gl, gh], f in [fl, fh] (broadcast):
    the products' hull, summed in float64, widened by the sum's rounding bound (Higham)."""
    p = np.stack(np.broadcast_arrays(gl * fl, gl * fh, gh * fl, gh * fh))
    lo, hi = p.min(axis=0), p.max(axis=0)
    err = rounding_gamma(lo.shape[-1] + 2, U64) * np.maximum(np.abs(lo), np.abs(hi)).sum(-1) * _UP * _UP
    return np.nextafter(lo.sum(-1) - err, -np.inf), np.nextafter(hi.sum(-1) + err, np.inf)


def _rows(g: np.ndarray, e: np.ndarray, f: Interval, G: Interval, level: float, umax: np.ndarray, cushion: bool) -> Rows:
    """The rows of gradients in [g - e, g + e] (P, n) over a tube where f (P or 1, n) and G
    (P or 1, n, m) range: a = min g . f + level - (b's radius) . |u|max, b = b's midpoint (module docstring;
    the certifier takes the radius twice, which puts its rows below the filter's)."""
    gl, gh = np.nextafter(g - e, -np.inf), np.nextafter(g + e, np.inf)
    a_lo, a_hi = _dot(gl, gh, f.lo, f.hi)
    b_lo, b_hi = _dot(gl[:, None, :], gh[:, None, :], np.swapaxes(G.lo, 1, 2), np.swapaxes(G.hi, 1, 2))
    if cushion:
        a_lo, b_lo, b_hi = _widen_lo(a_lo, a_hi), _widen_lo(b_lo, b_hi), -_widen_lo(-b_hi, -b_lo)
    mid = 0.5 * (b_lo + b_hi)
    rad = np.maximum(mid - b_lo, b_hi - mid) * _UP
    level = np.where(level != 0, np.nextafter(level, -np.inf), 0.0)
    reach = (rad * umax).sum(-1) * _UP * (2.0 if cushion else 1.0)
    return Rows(np.nextafter(np.nextafter(a_lo + level, -np.inf) - reach, -np.inf), mid)


def _widen_lo(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return lo - (CUSHION * np.maximum(np.abs(lo), np.abs(hi)) + 1e-300)


def _widen(x: Interval) -> Interval:
    pad = CUSHION * np.maximum(np.abs(x.lo), np.abs(x.hi)) + 1e-300
    return Interval(x.lo - pad, x.hi + pad)


def row_values(rows: Rows, u: np.ndarray) -> np.ndarray:
    """min over the rows of a + b . u at each input u (K, m), float64 with its rounding taken
    off (so >= 0 here means every row holds at u)."""
    u = np.atleast_2d(u)
    terms = rows.b[None] * u[:, None, :]
    value = rows.a[None] + terms.sum(-1)
    slop = rounding_gamma(rows.b.shape[1] + 2, U64) * (np.abs(rows.a)[None] + np.abs(terms).sum(-1)) * _UP
    return (value - slop).min(axis=1)


def maximin(rows: Rows, u_lo: np.ndarray, u_hi: np.ndarray, want: float = 2 * DELTA) -> tuple[float, np.ndarray]:
    """(a verified lower bound of max over the input box of min_p a_p + b_p . u, the input that
    achieves it): the box's vertices and centre first, the LP (HiGHS) when none reaches ``want``;
    every value is recomputed at its input (``row_values``), never taken from the solver."""
    m = len(u_lo)
    cands = np.array(list(itertools.product(*zip(u_lo, u_hi))) + [0.5 * (u_lo + u_hi)], dtype=float).reshape(-1, m)
    vals = row_values(rows, cands)
    best = int(np.argmax(vals))
    if vals[best] >= want or m == 0:
        return float(vals[best]), cands[best]
    if m == 1:              # concave in one variable: a zoomed grid and the active rows' crossing
        u = _line_max(rows, float(u_lo[0]), float(u_hi[0]))
        v = float(row_values(rows, u)[0])
        return (v, u) if v > vals[best] else (float(vals[best]), cands[best])
    solved = _maximin_lp(rows, u_lo, u_hi)
    if solved is not None:
        u = np.clip(solved[0][:m], u_lo, u_hi)
        v = float(row_values(rows, u)[0])
        if v > vals[best]:
            return v, u
    return float(vals[best]), cands[best]


def single_row_maximin(rows: Rows, u_lo: np.ndarray, u_hi: np.ndarray) -> np.ndarray:
    """max over the input box of a + b . u for one row per box (a (B,), b (B, m)): at the
    vertex b's signs pick, verified there like ``row_values`` (rounding taken off)."""
    u = np.where(rows.b >= 0, u_hi, u_lo)
    terms = rows.b * u
    slop = rounding_gamma(rows.b.shape[1] + 2, U64) * (np.abs(rows.a) + np.abs(terms).sum(-1)) * _UP
    return rows.a + terms.sum(-1) - slop


def _maximin_lp(rows: Rows, u_lo: np.ndarray, u_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """HiGHS on  max t  s.t.  t - b_p . u <= a_p,  u in the box  (variables u, t): (the
    solution, the rows' duals (<= 0)), None unless optimal.  One solver per process, its model
    replaced each call (scipy's linprog spent 5x HiGHS's own time on option checks here)."""
    global _LP
    import highspy as hs
    if _LP is None:
        from training.certify.regions import _quiet
        _LP = _quiet(hs.Highs)
        _LP.setOptionValue("output_flag", False)
        _LP.setOptionValue("presolve", "off")        # halves the time of these small LPs
        _LP.setOptionValue("solver", "simplex")
    P, m = rows.b.shape
    lp = hs.HighsLp()
    lp.num_col_, lp.num_row_ = m + 1, P
    lp.col_cost_ = np.concatenate([np.zeros(m), [-1.0]])
    lp.col_lower_ = np.concatenate([u_lo, [-hs.kHighsInf]]).astype(float)
    lp.col_upper_ = np.concatenate([u_hi, [hs.kHighsInf]]).astype(float)
    lp.row_lower_ = np.full(P, -hs.kHighsInf)
    lp.row_upper_ = np.asarray(rows.a, float)
    lp.a_matrix_.format_ = hs.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.arange(0, P * (m + 1) + 1, m + 1, dtype=np.int32)
    lp.a_matrix_.index_ = np.tile(np.arange(m + 1, dtype=np.int32), P)
    lp.a_matrix_.value_ = np.hstack([-rows.b, np.ones((P, 1))]).ravel()
    _LP.clearModel()
    _LP.passModel(lp)
    _LP.run()
    if _LP.getModelStatus() != hs.HighsModelStatus.kOptimal:
        return None
    solution = _LP.getSolution()
    return np.array(solution.col_value, dtype=float), np.array(solution.row_dual, dtype=float)


_LP = None                   # this process's HiGHS solver for ``_maximin_lp``


def _line_max(rows: Rows, lo: float, hi: float, points: int = 33, steps: int = 40) -> np.ndarray:
    """The maximiser of the concave min_p a_p + b_p u over [lo, hi] (one input): the best of
    a grid brackets it, then the crossing of the row lowest at the bracket's left end with the
    row lowest at its right end replaces the end on its side, until the crossing lies on those
    rows (then it is the maximiser).  A candidate only: ``maximin`` re-evaluates it."""
    a, b = rows.a, rows.b[:, 0]
    u = np.linspace(lo, hi, points)
    values = (a[:, None] + b[:, None] * u[None]).min(axis=0)
    k = int(np.argmax(values))
    best_u, best_v = u[k], values[k]
    left, right = u[max(k - 1, 0)], u[min(k + 1, points - 1)]
    for _ in range(steps):
        i, j = int(np.argmin(a + b * left)), int(np.argmin(a + b * right))
        if not b[i] > b[j]:
            break
        c = min(max((a[j] - a[i]) / (b[i] - b[j]), left), right)
        at = a + b * c
        low = int(np.argmin(at))
        if at[low] > best_v:
            best_u, best_v = c, at[low]
        if at[low] >= min(at[i], at[j]) or not left < c < right:
            break
        if b[low] > 0:            # the envelope still rises at c: the maximiser lies right of it
            left = c
        else:
            right = c
    return np.array([best_u])


def no_input_bound(rows: Rows, u_lo: np.ndarray, u_hi: np.ndarray) -> float:
    """An upper bound of max_u min_p a_p + b_p . u by weak duality: for weights lam >= 0 summing
    to 1 (the LP's duals), it is <= sum lam a + max_u (sum lam b) . u.  < 0 proves that no input
    in the box satisfies every row: the filter has none to return."""
    m, P = len(u_lo), len(rows.a)
    solved = _maximin_lp(rows, u_lo, u_hi)
    lam = np.maximum(-solved[1], 0.0) if solved is not None else np.ones(P)
    lam = lam / lam.sum() if lam.sum() > 0 else np.full(P, 1.0 / P)
    mix_a = float(lam @ rows.a)
    mix_b = lam @ rows.b
    best = float(np.maximum(mix_b * u_lo, mix_b * u_hi).sum())
    slop = rounding_gamma(P + m + 2, U64) * (float(lam @ np.abs(rows.a)) + float((lam @ np.abs(rows.b)) @ np.maximum(np.abs(u_lo), np.abs(u_hi)))) * 2
    return mix_a + best + slop
