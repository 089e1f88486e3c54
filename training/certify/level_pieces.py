"""The boundary row of a ReLU network on {h = 0}, piece by piece (``--condition boundary``).

On a box, ``compiler.bounds_pieces.pieces`` enumerates the activation patterns that may occur,
layer by layer, each pre-activation bounded by the piece's own affine map over the box: a
pattern no state of the box can take is never built.  The bounds are widened by the float32
header's error on them (and intersected with the interval/zonotope enclosures, widened the
same way, ``patterns.preactivation_enclosures``), so the header's own pattern at any state is
one of the pieces too.  On piece S the network is affine, h_S(x) = g . x + c (float64, with a
rigorous bound on the rounding), and its gradient is g.

The condition is asked only where the header's h is 0, so where the real h lies within e_h of
0: on piece S that is the slab |h_S(x)| <= eps of the box (eps also holds g's and c's
rounding), which the piece may not meet at all (then it asks nothing there).  The row at x
with input u is g . F_u(x); by the mean-value theorem F_u(x) lies in F_u(c) + J_u(B)(x - c)
(c: the box's centre, J_u = J_f + sum_k u_k J_gk over the box), so with s = g^T J_u(B) and
any multiplier lam (weak duality for the slab),

    min over the slab of g . F_u(x)  >=  lo(g . F_u(c)) - s_rad . r
                                        + lam h_S(c) - |lam| eps - sum_i |s_mid_i + lam g_i| r_i.

The right side is concave and piecewise linear in lam; its maximum lies at one of its
breakpoints (0 and -s_mid_i / g_i), and all of them are evaluated.  For a linear plant
(s_rad = 0: the spacecraft, hi-ord8) this is the exact minimum of the row over the slab of the
box.  Less the header's and float64's gradient rounding (e_t + g_err) . |F_u(B)|, it is a lower
bound of the row on the piece; the interval product lo(g . F_u(B)) is one too, and the larger
counts.  Where one piece meets the slab, the box's score is the better of two inputs' bounds.
Where several do, a ridge between them may cross {h = 0}, and the nonsmooth condition (its
Clarke form, ``ridges.py``) asks one input for all of them: the score is the best, over
common inputs, of the least bound over the pieces (``_common_input_row``).  On a box with more
than ``MAX_UNSTABLE`` unstable neurons no piece is built and the score is -inf (the box is split).
A piece whose bound is < 0 has its slab's multiplier joined by one per cut of its own region
(``region_dual.py``): the enumeration keeps patterns no state of the slab takes, and without
their regions those sink the box (the trained 3 x 8 spacecraft student: 28,118 boxes before,
with piece_containment.py 4,787).

Before this bound, every pattern of the unstable neurons was bounded against F over the whole
box.  On 300 boxes 1/16 of the domain wide centred on {h = 0} of the 3 x 16 spacecraft student
that proved 19%, this 35%; at 1/32, 76% and 90% (``benchmarks/relu_pieces.py``).  The limit is
now the enumeration: each pre-activation's own bound leaves a median of 292 pieces in a 1/16
box where an LP per piece finds 10 to 85 real regions.
"""
from __future__ import annotations

import numpy as np

from compiler.bounds_pieces import pieces
from compiler.interval import Interval, gamma
from compiler.passes import canonicalize

from .centred import best_vertex, vertices_and_centre
from . import region_dual
from .patterns import header_tangent_rounding, preactivation_enclosures
from .terms import PlantTerms, take_rows

MAX_UNSTABLE = 8           # unstable neurons in a box before it is left to splitting (6: 7.1 s, 8: 6.8 s,
#                            10: 11.8 s for the ReLU 3-64-64-1 obstacle-avoidance certificate)
MAX_VERTEX_INPUTS = 4      # inputs m up to which every vertex of U is a common-input candidate (2^m of them)
CHUNK_BOXES = 256          # boxes enumerated at once (a box may hold up to 2^MAX_UNSTABLE pieces)
_UP = 1.0 + 2.0 ** -40     # rounds a short sum of nonnegative float64 terms up
_U = 2.0 ** -53


def level_piece_row(model, box: Interval, centre: PlantTerms, plant: PlantTerms, u_lo: np.ndarray,
                    u_hi: np.ndarray, max_unstable: int = MAX_UNSTABLE) -> np.ndarray:
    """(B,) lower bound of the boundary row on {h = 0} over each box (module docstring); +inf
    where no piece meets the slab, -inf where a box has too many unstable neurons.  ``centre``:
    the plant's f and G at each box's centre (point boxes); ``plant``: f, G and their Jacobians
    (``with_input_jacobian``) over the boxes; the input box [u_lo, u_hi].  Each piece is bounded
    at two inputs: the vertex of U that maximises g^T G u at the box's centre, and over the box
    (for a constant G both are the exact maximiser)."""
    model = canonicalize(model)
    u_lo, u_hi = np.asarray(u_lo, dtype=float), np.asarray(u_hi, dtype=float)
    out = np.empty(box.shape[0])
    for start in range(0, box.shape[0], CHUNK_BOXES):
        rows = slice(start, start + CHUNK_BOXES)
        out[rows] = _chunk(model, box[rows], take_rows(centre, rows), take_rows(plant, rows), u_lo, u_hi,
                           max_unstable)
    return out


def _chunk(model, box: Interval, centre: PlantTerms, plant: PlantTerms, u_lo: np.ndarray, u_hi: np.ndarray,
           max_unstable: int) -> np.ndarray:
    enclosures, errors, e_h = preactivation_enclosures(model, box)
    active = [lo > 0 for lo, _ in enclosures]
    unstable = [(lo <= 0) & (hi > 0) for lo, hi in enclosures]
    score = np.full(box.shape[0], -np.inf)
    count = sum((u.sum(axis=1) for u in unstable), np.zeros(box.shape[0], dtype=int))
    few = np.flatnonzero(count <= max_unstable)                     # the rest: no piece is built
    if not len(few):
        return score
    box, centre, plant, e_h = box[few], take_rows(centre, few), take_rows(plant, few), e_h[few]
    enclosures = [(lo[few], hi[few]) for lo, hi in enclosures]
    errors, active, unstable = [e[few] for e in errors], [a[few] for a in active], [u[few] for u in unstable]
    found = pieces(model, box, max_unstable, widen=errors, clamp=enclosures, cuts=True)
    e_t = header_tangent_rounding(model, active, unstable, box.shape[0])
    b = found.box_index
    g, g_err = found.g, found.g_err
    xc, r = np.clip(box.mid, box.lo, box.hi)[b], box.rad[b]          # the centre conditions.py takes the plant at
    cut_a, cut_b = region_dual.region_rows(found.cuts, xc, r)
    # h_S(xc + d) = g . d + h_c + delta, |delta| <= the rounding of g, c and of h_c's own sum
    h_c = np.einsum("pi,pi->p", g, xc) + found.c
    delta = (gamma(g.shape[1] + 1) * (np.einsum("pi,pi->p", np.abs(g), np.abs(xc)) + np.abs(found.c))
             + found.c_err + np.einsum("pi,pi->p", g_err, np.abs(xc) + r)) * _UP
    eps = np.nextafter((e_h[b] + delta) * _UP, np.inf)
    reach = np.einsum("pi,pi->p", np.abs(g), r) * (1 + 4 * _U) * _UP
    meets = np.abs(h_c) - np.abs(h_c) * 2 * _U - reach <= eps              # the slab may be non-empty
    loss_g = g_err + e_t[b]
    least = np.full(box.shape[0], np.inf)
    shared = np.bincount(b[meets], minlength=box.shape[0]) > 1          # a ridge may cross {h = 0} here
    alone = np.flatnonzero(meets & ~shared[b])
    if len(alone):                      # one piece meets the slab: its own best input
        rows = _RowParts(g[alone], centre, plant, b[alone], (cut_a[alone], cut_b[alone]))
        best = rows.bounds([best_vertex(gains.mid, u_lo, u_hi) for gains in (rows.G_c, rows.G_B)], loss_g[alone],
                           h_c[alone], eps[alone], r[alone]).max(axis=1)
        np.minimum.at(least, b[alone], best)
    together = np.flatnonzero(meets & shared[b])
    if len(together):                   # one input for every piece that meets the slab (the Clarke form)
        rows = _RowParts(g[together], centre, plant, b[together], (cut_a[together], cut_b[together]))
        least[shared] = _common_input_row(rows, b[together], box.shape[0], loss_g[together], h_c[together],
                                          eps[together], r[together], u_lo, u_hi)[shared]
    score[few] = np.where(found.enumerated, least, -np.inf)
    return score


def _common_input_row(rows: "_RowParts", owner: np.ndarray, boxes: int, loss_g: np.ndarray, h_c: np.ndarray,
                      eps: np.ndarray, r: np.ndarray, u_lo: np.ndarray, u_hi: np.ndarray) -> np.ndarray:
    """(boxes,) the best, over candidate inputs, of the least bound over each box's pieces at that
    one input.  First the vertex of U best for the box's summed gains; on the boxes that fails,
    every vertex (for m <= ``MAX_VERTEX_INPUTS``) and the centre of U, then the input an LP
    mixes from their bounds (``_mixed_inputs``)."""
    m = len(u_lo)
    summed = np.zeros((boxes, m))
    np.add.at(summed, owner, rows.G_c.mid)
    first = best_vertex(summed, u_lo, u_hi)[owner]
    best = _least_per_box(rows.bound(first, loss_g, h_c, eps, r), owner, boxes)
    open_ = np.flatnonzero(best[owner] < 0)                      # the pieces of the boxes still failing
    if not len(open_) or not m:
        return best
    rows, owner, loss_g, h_c, eps, r = rows.take(open_), owner[open_], loss_g[open_], h_c[open_], eps[open_], r[open_]
    tried = [first[open_], np.tile(0.5 * (u_lo + u_hi), (len(owner), 1))]
    if m <= MAX_VERTEX_INPUTS:
        tried += [np.tile(u, (len(owner), 1)) for u in vertices_and_centre(u_lo, u_hi)[:-1]]
    values = rows.bounds(tried, loss_g, h_c, eps, r)                                      # (P, K)
    reopened = np.zeros(boxes, dtype=bool)
    reopened[owner] = True
    for k in range(1, values.shape[1]):
        best = np.where(reopened, np.maximum(best, _least_per_box(values[:, k], owner, boxes)), best)
    # a mix of the tried inputs can reach at most each piece's best among them (an affine bound):
    # the LP is worth its cost only where every piece has some input with a bound >= 0
    reachable = _least_per_box(values.max(axis=1), owner, boxes) >= 0
    failing = np.flatnonzero(np.isfinite(best) & (best < 0) & reachable)
    if len(failing):
        u, solved = _mixed_inputs(values, tried, owner, failing, boxes)
        if solved.any():
            mixed = _least_per_box(rows.bound(np.clip(u, u_lo, u_hi), loss_g, h_c, eps, r), owner, boxes)
            best = np.maximum(best, np.where(solved, mixed, -np.inf))
    return best


def _least_per_box(values: np.ndarray, owner: np.ndarray, boxes: int) -> np.ndarray:
    least = np.full(boxes, np.inf)
    np.minimum.at(least, owner, values)
    return least


def _mixed_inputs(values: np.ndarray, tried: list[np.ndarray], owner: np.ndarray, failing: np.ndarray,
                  boxes: int) -> tuple[np.ndarray, np.ndarray]:
    """((P, m) per piece, its box's input sum_k w_k u_k; (boxes,) whether the box has one), with
    the weights w (a point of the simplex) that maximise the least over the box's pieces of
    sum_k w_k bound_k, on the failing boxes where that reaches 0: the exact maximiser where each
    bound is affine in u (a constant G), a candidate like any other elsewhere (the bound is
    evaluated again at it).  One LP for all the boxes, block by block (per box: maximise t,
    t - sum_k w_k v_pk <= 0 per piece, sum_k w_k = 1, w >= 0): one scipy call instead of one
    per box (the trained 3 x 8 spacecraft student: 164 boxes, 0.9 s of 6.7 s in calls)."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix
    K = values.shape[1]
    weights = np.full((boxes, K), np.nan)
    finite = np.ones(boxes, dtype=bool)
    np.logical_and.at(finite, owner, np.all(np.isfinite(values), axis=1))
    take = np.flatnonzero(np.isin(owner, failing[finite[failing]]))          # the pieces of the boxes solved
    if not len(take):
        return np.zeros((len(owner), tried[0].shape[1])), np.zeros(boxes, dtype=bool)
    box_ids, block = np.unique(owner[take], return_inverse=True)           # block: each piece's box, 0 .. B-1
    B, P = len(box_ids), len(take)
    # variables: w (B, K) flattened, then t (B); rows: one per piece
    rows = np.repeat(np.arange(P), K + 1)
    cols = np.c_[block[:, None] * K + np.arange(K), K * B + block].ravel()
    data = np.c_[-values[take], np.ones(P)].ravel()
    A_ub = coo_matrix((data, (rows, cols)), shape=(P, (K + 1) * B)).tocsr()
    A_eq = coo_matrix((np.ones(B * K), (np.repeat(np.arange(B), K), np.arange(B * K))), shape=(B, (K + 1) * B)).tocsr()
    res = linprog(np.r_[np.zeros(B * K), -np.ones(B)], A_ub=A_ub, b_ub=np.zeros(P), A_eq=A_eq, b_eq=np.ones(B),
                  bounds=[(0, None)] * (B * K) + [(None, None)] * B, method="highs")
    if res.status == 0:
        w, t = res.x[:B * K].reshape(B, K), res.x[B * K:]
        reached = t >= 0
        weights[box_ids[reached]] = w[reached]
    solved = ~np.isnan(weights[:, 0])
    w = np.nan_to_num(weights[owner])                                     # (P, K); unused where not solved
    return np.einsum("pk,kpm->pm", w, np.stack(tried)), solved


class _RowParts:
    """The input-free parts of each piece's row g . F_u, so each candidate input costs (P, n):
    g . f and g^T G at the box's centre and over the box, and s = g^T J_f, g^T J_gk over it."""

    def __init__(self, g: np.ndarray, centre: PlantTerms, plant: PlantTerms, b: np.ndarray,
                 cuts: tuple[np.ndarray, np.ndarray] | None = None):
        gp = Interval.point(g)
        self.f_c, self.G_c = (gp * centre.f[b]).sum(-1), (gp[:, :, None] * centre.G[b]).sum(1)      # (P,), (P, m)
        self.f_B, self.G_B = (gp * plant.f[b]).sum(-1), (gp[:, :, None] * plant.G[b]).sum(1)
        self.s_f = (gp[:, :, None] * plant.Jf[b]).sum(1)                                         # (P, n)
        self.s_G = (gp[:, None, :, None] * plant.JG[b]).sum(2)                                   # (P, m, n)
        self.input_free = bool(np.all(plant.JG.lo == 0) and np.all(plant.JG.hi == 0))   # G constant: s is u-free
        self.F_f, self.F_G = plant.f[b], plant.G[b]
        self.g = g
        self.cut_a, self.cut_b = cuts if cuts is not None else (None, None)     # the region's a . d + b >= 0
        self.dual = self.spread_s = self.s_mid = self.lam = self.tightened = None    # the slab's dual (``bounds``)

    def take(self, idx: np.ndarray) -> "_RowParts":
        """The same parts for the pieces ``idx`` only."""
        out = object.__new__(_RowParts)
        for name, value in vars(self).items():
            setattr(out, name, value if value is None or isinstance(value, bool) else value[idx])
        return out

    def bound(self, u: np.ndarray, g_loss: np.ndarray, h_c: np.ndarray, eps: np.ndarray, r: np.ndarray) -> np.ndarray:
        """(P,) lower bound of g . F_u(x) on each piece's slab (module docstring), less the
        gradient's rounding ``g_loss`` . |F_u(B)|."""
        return self.bounds([u], g_loss, h_c, eps, r)[:, 0]

    def bounds(self, inputs: list[np.ndarray], g_loss: np.ndarray, h_c: np.ndarray, eps: np.ndarray,
               r: np.ndarray) -> np.ndarray:
        """(P, K) ``bound`` at each of K inputs (P, m).  A piece whose bound is < 0 at some input
        has its slab dual raised by its region's cuts (``region_dual.py``).  Where G is constant
        (J_G = 0: the spacecraft, hi-ord8) the dual does not depend on u: it is computed once,
        and kept (``take`` carries it) for later calls."""
        if self.input_free:
            return self._bounds(inputs, inputs[0], g_loss, h_c, eps, r, reuse=True)
        return np.concatenate([self._bounds([u], u, g_loss, h_c, eps, r, reuse=False) for u in inputs], axis=1)

    def _bounds(self, inputs: list[np.ndarray], u_dual: np.ndarray, g_loss: np.ndarray, h_c: np.ndarray,
                eps: np.ndarray, r: np.ndarray, reuse: bool) -> np.ndarray:
        """``bounds`` with the slab's dual taken at the input u_dual, or (``reuse``) the one the
        last call left."""
        if self.dual is None or not reuse:
            s = self.s_f + (self.s_G * Interval.point(u_dual)[:, :, None]).sum(1)
            self.dual, self.spread_s, self.s_mid, self.lam = self._slab_dual(s, h_c, eps, r)
            self.tightened = np.zeros(len(self.dual), dtype=bool)
        parts = [self._input_parts(u, g_loss) for u in inputs]
        values = np.stack([self._value(*part) for part in parts], axis=1)
        weak = np.flatnonzero(np.any(values < 0, axis=1) & ~self.tightened)
        if self.cut_a is not None and len(weak):
            need = np.max([spread - at_centre for at_centre, spread, _ in parts], axis=0)[weak]
            self.dual[weak] = np.fmax(self.dual[weak], region_dual.raised(
                self.s_mid[weak], self.g[weak], h_c[weak], eps[weak], self.cut_a[weak], self.cut_b[weak], r[weak],
                self.lam[weak], need))
            self.tightened[weak] = True
            values = np.stack([self._value(*part) for part in parts], axis=1)
        return np.where(np.isnan(values), -np.inf, values)

    def _input_parts(self, u: np.ndarray, g_loss: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(g . F_u at the box's centre, rounded down; the slab bound's spread; the whole box's bound) at u."""
        u_iv = Interval.point(u)
        F_mag = (self.F_f + (self.F_G * u_iv[:, None, :]).sum(-1)).mag
        with np.errstate(invalid="ignore", over="ignore"):
            rounding = np.einsum("pi,pi->p", g_loss, F_mag) * _UP
            at_centre = (self.f_c + (self.G_c * u_iv).sum(-1)).lo
            whole_box = (self.f_B + (self.G_B * u_iv).sum(-1)).lo
            return at_centre, (self.spread_s + rounding) * _UP, np.nextafter(whole_box - rounding, -np.inf)

    def _value(self, at_centre: np.ndarray, spread: np.ndarray, box_wide: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):
            slab = np.nextafter(np.nextafter(at_centre + self.dual, -np.inf) - spread, -np.inf)
            return np.fmax(slab, box_wide)

    def _slab_dual(self, s: Interval, h_c: np.ndarray, eps: np.ndarray, r: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(the best multiplier's term over the breakpoints, s_rad . r, s_mid, that multiplier)
        for the slope s = g^T J_u(B)."""
        g = self.g
        s_mid = np.clip(s.mid, s.lo, s.hi)
        s_rad = np.nextafter(np.maximum(s.hi - s_mid, s_mid - s.lo), np.inf)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            kinks = np.where(g != 0, -s_mid / np.where(g != 0, g, 1.0), 0.0)
            lam = np.concatenate([np.zeros((len(g), 1)), np.where(np.isfinite(kinks), kinks, 0.0)], axis=1)
            # lam: (P, n + 1), every breakpoint
            lam_h = lam * h_c[:, None]
            lam_h = lam_h - np.abs(lam_h) * 2 * _U
            slope = s_mid[:, None, :] + lam[:, :, None] * g[:, None, :]                       # (P, n + 1, n)
            lam_g = np.abs(lam[:, :, None] * g[:, None, :])
            slope_up = np.abs(slope) + 2 * _U * (np.abs(s_mid)[:, None, :] + 2 * lam_g)
            cost = (np.abs(lam) * eps[:, None] + np.einsum("pki,pi->pk", slope_up, r)) * _UP * _UP
            dual = np.nextafter(lam_h - cost, -np.inf)
            best = np.argmax(dual, axis=1)
            rows = np.arange(len(g))
            return dual[rows, best], np.einsum("pi,pi->p", s_rad, r), s_mid, lam[rows, best]
