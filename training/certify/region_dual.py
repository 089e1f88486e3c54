"""The least of a piece's row over its own region of the box and {h = 0} (level_pieces.py).

On piece S of a box (centre xc, radius r; d = x - xc), the row is s . d plus a constant, the
zero level is the slab |h_c + g . d| <= eps, and the piece's region is the branched neurons'
sign conditions a_k . d + b_k >= 0 (``compiler.bounds_pieces.RegionCuts``, widened by the
float32 header's error, so every state where the header or the real network takes S, or whose
closure S's region holds, satisfies them).  For any multipliers lam (any sign) and mu >= 0, weak
duality gives

    min s . d  >=  D(lam, mu) = lam h_c - |lam| eps - sum_k mu_k b_k
                                - sum_i |s_i + lam g_i - sum_k mu_k a_ki| r_i.

With mu = 0 this is the slab's bound of level_pieces.py, which ignores the region: a pattern the
enumeration keeps because each neuron's own bound allows it, though no state of the slab takes
it, then sinks the box.  D is concave and piecewise linear; ``ascend`` maximises it one
multiplier at a time, each exactly (a weighted median of its breakpoints), from the slab's best
lam.  Coordinate ascent may stop short of the LP's optimum, but every point it reaches is a
valid bound, and ``value`` evaluates it with float64's rounding on the safe side.  A direction
along which D grows without end proves the piece's part of the slab empty: the multiplier is
set to ``FAR`` and D comes out large.  Emptiness that only a combination of cuts shows is out of
reach of one multiplier at a time from 0; ``emptiness`` starts from every cut weighted alike,
and ``raised`` (what the callers use) tries it where the ascent falls short of what is asked.
Other rows than cuts go in the same way: ``piece_containment.py`` adds the constraint's.

On 60 boxes 1/4 of hi-ord8's domain wide centred on {h = 0} of its first ReLU 8-16-1 student,
the slab's bound proves 82% and this 98% after 6 sweeps (scipy's exact LP: 100% of 15).  On
random pieces the ascent reaches the LP's minimum on about 40% (tests/test_region_dual.py);
solving the LP for every piece still failing proved 3% more boxes of the 3 x 8 spacecraft
student at 3x the time, so it is not done.
"""
from __future__ import annotations

import numpy as np

from compiler.bounds_pieces import RegionCuts
from compiler.interval import gamma

SWEEPS = 6
FAR = 1e12                 # a multiplier along a direction where D increases without end
_UP = 1.0 + 2.0 ** -40
_U = 2.0 ** -53


def region_rows(cuts: RegionCuts, xc: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a (P, K, n), b (P, K)): each piece's cuts as a . d + b >= 0 for d = x - xc in [-r, r],
    with the rounding of the cut's A, c and of A xc + c moved into b (rounded up), so the
    inequality holds for the real pre-activation.  A slot bounded on both sides (hardtanh's
    middle) keeps its lower side; slots without a finite bound are inert (a = 0, b = 0)."""
    n = xc.shape[1]
    z_c = np.einsum("pki,pi->pk", cuts.A, xc) + cuts.c
    err = (gamma(n + 1) * (np.einsum("pki,pi->pk", np.abs(cuts.A), np.abs(xc)) + np.abs(cuts.c))
           + np.einsum("pki,pi->pk", cuts.eA, np.abs(xc) + r) + cuts.ec + cuts.slack) * _UP
    lower = np.isfinite(cuts.lo)
    upper = ~lower & np.isfinite(cuts.hi)
    sign = np.where(lower, 1.0, np.where(upper, -1.0, 0.0))
    kink = np.where(lower, cuts.lo, np.where(upper, cuts.hi, 0.0))
    t = sign * (z_c - kink)
    b = np.nextafter(t + (err + 4 * _U * np.abs(t)) * _UP, np.inf)
    return sign[:, :, None] * cuts.A, np.where(sign != 0, b, 0.0)


def ascend(s: np.ndarray, g: np.ndarray, h_c: np.ndarray, eps: np.ndarray, a: np.ndarray, b: np.ndarray,
           r: np.ndarray, lam: np.ndarray, sweeps: int = SWEEPS, mu: np.ndarray | None = None) -> np.ndarray:
    """(P, 1 + K) multipliers (lam, mu) raising D (module docstring), from (lam, mu) (mu: 0 unless given)."""
    P, K, _ = a.shape
    M = np.concatenate([g[:, None, :], -a], axis=1)             # (P, 1 + K, n): v = s + sum_j y_j M_j
    linear = np.concatenate([h_c[:, None], -b], axis=1)          # (P, 1 + K)
    y = np.zeros((P, K + 1))
    y[:, 0] = lam
    if mu is not None:
        y[:, 1:] = mu
    v = s + np.einsum("pk,pki->pi", y, M)
    rows = np.arange(P)
    for _ in range(sweeps):
        for j in range(K + 1):
            m = M[:, j]
            rest = v - y[:, j:j + 1] * m
            with np.errstate(divide="ignore", invalid="ignore"):
                knots = np.where(m != 0, -rest / np.where(m != 0, m, 1.0), 0.0)
            weights = r * np.abs(m)
            if j == 0:                                           # |lam| eps: a knot at 0 of weight eps
                knots = np.concatenate([knots, np.zeros((P, 1))], axis=1)
                weights = np.concatenate([weights, eps[:, None]], axis=1)
            order = np.argsort(knots, axis=1)
            knots, weights = np.take_along_axis(knots, order, 1), np.take_along_axis(weights, order, 1)
            total = weights.sum(axis=1)
            # D's slope just right of the k-th knot: linear_j + total - 2 (weights up to k)
            right = linear[:, j, None] + total[:, None] - 2 * np.cumsum(weights, axis=1)
            t = knots[rows, np.argmax(right <= 0, axis=1)]
            t = np.where(right[:, -1] > 0, FAR, np.where(linear[:, j] + total < 0, -FAR, t))
            if j:
                t = np.maximum(t, 0.0)                           # mu >= 0: D is concave, so clamp
            v = rest + t[:, None] * m
            y[:, j] = t
    return y


def raised(s: np.ndarray, g: np.ndarray, h_c: np.ndarray, eps: np.ndarray, a: np.ndarray, b: np.ndarray,
           r: np.ndarray, lam: np.ndarray, need: np.ndarray) -> np.ndarray:
    """(P,) a lower bound of min s . d over each piece's cuts, slab and box: D at the ascent's
    multipliers from (lam, 0), and where that stays below ``need`` (what the caller's condition
    asks of it), at ``emptiness``'s too."""
    args = (s, g, h_c, eps, a, b, r)
    bound = value(ascend(*args, lam), *args)
    short = np.flatnonzero(bound < need)
    if len(short):
        sub = tuple(v[short] for v in args)
        bound[short] = np.fmax(bound[short], value(emptiness(*sub[1:]), *sub))
    return bound


def emptiness(g: np.ndarray, h_c: np.ndarray, eps: np.ndarray, a: np.ndarray, b: np.ndarray, r: np.ndarray,
              sweeps: int = SWEEPS) -> np.ndarray:
    """(P, 1 + K) multipliers FAR * y where D's homogeneous part (s = 0) is positive at y, so the
    piece's cuts, slab and box have no common state and D grows without end along y; zero
    elsewhere.  The ascent from (0, 0) moves one multiplier at a time and misses emptiness that
    only a combination of cuts shows (x1 >= 0.5 and x1 <= -0.5): this one starts from every cut
    weighted alike (1 / (|a_k| . r)), where such a combination is often positive already."""
    P, K, n = a.shape
    scale = np.einsum("pki,pi->pk", np.abs(a), r)
    mu = np.where(scale > 0, 1.0 / np.where(scale > 0, scale, 1.0), 0.0)
    zero = np.zeros((P, n))
    y = ascend(zero, g, h_c, eps, a, b, r, np.zeros(P), sweeps, mu)
    empty = value(y, zero, g, h_c, eps, a, b, r) > 0
    return np.where(empty[:, None], FAR * y / np.maximum(np.abs(y).max(axis=1, keepdims=True), 1e-300), 0.0)


def value(y: np.ndarray, s: np.ndarray, g: np.ndarray, h_c: np.ndarray, eps: np.ndarray, a: np.ndarray,
          b: np.ndarray, r: np.ndarray) -> np.ndarray:
    """(P,) D at the multipliers y (P, 1 + K), rounded down: a lower bound of s . d over the
    piece's region of the slab (+large where the multipliers prove it empty)."""
    lam, mu = y[:, 0], y[:, 1:]
    K = mu.shape[1]
    v = s + lam[:, None] * g - np.einsum("pk,pki->pi", mu, a)
    v_err = gamma(K + 3) * (np.abs(s) + np.abs(lam[:, None] * g) + np.einsum("pk,pki->pi", mu, np.abs(a)))
    mu_b = np.einsum("pk,pk->p", mu, b)
    lam_h = lam * h_c
    cost = (np.abs(lam) * eps + np.einsum("pi,pi->p", np.abs(v) + v_err * _UP, r)) * _UP * _UP
    err = (4 * _U * (np.abs(lam_h) + np.abs(mu_b) + cost) + gamma(K + 2) * np.einsum("pk,pk->p", mu, np.abs(b))) * _UP
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.nextafter(lam_h - mu_b - cost - err, -np.inf)
    return np.where(np.isnan(out), -np.inf, out)
