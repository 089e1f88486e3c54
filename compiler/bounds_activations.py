"""Sound enclosures of each activation and its first two derivatives over an interval.

``ENCLOSURES[kind](x, params, float32=False)`` returns intervals (value, d1, d2) that contain
sigma^(k)(a) for every a in x, with the derivative conventions of compiler.activations at
kinks (ReLU'(0) = 0). Over an interval that straddles a kink the derivative enclosure is the
hull of both sides' values, so it contains the Clarke generalized derivative too (the
engine's interval duals then enclose the Clarke Jacobian of the network).

How: each kind is a list of smooth pieces split at its kinks. On a piece, the image of
sigma^(k) over [lo, hi] is the hull of its values at lo, hi and at the critical points of
sigma^(k) inside (all listed below; found analytically or, for SiLU and GELU, by mpmath at
40 digits, widened by ``CRIT_SLACK``). Values at those points come from sound interval
formulas evaluated on degenerate (or tiny) intervals, so rounding is covered.

``float32=True``: the float32 header compares against float32-rounded parameters and
computes its branch condition in float32, so each kink is widened to an interval covering
both the exact and the float32 position; both neighbouring pieces apply inside it.

``THIRD_DERIVATIVE_BOUND`` and ``float32_error`` serve the float32 mode of compiler.bounds:
the first carries an input error through sigma'', the second bounds each C++ body's own
evaluation error.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import interval as iv
from .interval import Interval

Triple = tuple[Interval, Interval, Interval]
U32 = 2.0 ** -24
CRIT_SLACK = 1e-12

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)     # the float64 constants compiler.activations defines gelu-tanh with
GELU_TANH_COEF = 0.044715


def _constant_enclosure(value: float, ulps: int = 4) -> Interval:
    """An interval around a real constant computed in a few float64 operations (each error
    below one ulp, so ``ulps`` ulps either side hold the real value)."""
    spread = ulps * math.ulp(value)
    return Interval(value - spread, value + spread)


INV_SQRT2 = _constant_enclosure(math.sqrt(0.5))
INV_SQRT_2PI = _constant_enclosure(1 / math.sqrt(2 * math.pi))


# --- sound formulas, evaluated only on points and tiny intervals -----------------------------
def _sigmoid_pair(x: Interval) -> tuple[Interval, Interval]:
    """sigma(x) and 1 - sigma(x) = sigma(-x), each without cancellation."""
    return 1.0 / (1.0 + iv.exp(-x)), 1.0 / (1.0 + iv.exp(x))


def _sech2(u: Interval) -> Interval:
    """1 - tanh(u)^2 = 4 e / (1 + e)^2 with e = exp(-2|u|): accurate in the tails."""
    e = iv.exp(-2.0 * iv.abs_(u))
    return 4.0 * e / (1.0 + e) ** 2


def _phi_cdf(x: Interval) -> Interval:
    """Standard normal CDF 0.5 erfc(-x / sqrt 2): increasing, so erfc at the endpoints of the
    outward-rounded argument (scipy's erfc is accurate to a few ulps, relative, in the tails)."""
    from scipy.special import erfc
    return iv.monotone(lambda v: 0.5 * erfc(-v), x * INV_SQRT2, 0.0, 1.0)


def _f_tanh(x, p) -> Triple:
    t = iv.tanh(x)
    d1 = _sech2(x)
    return t, d1, -2.0 * t * d1


_TANH_POINT_ULPS = 4 * iv.TRANSCENDENTAL_ULPS + 8


def _p_tanh(a: np.ndarray, p) -> Triple:
    """``_f_tanh`` at the points ``a`` in plain float64, widened (as ``_p_softplus_smooth``).
    Relative errors (T = TRANSCENDENTAL_ULPS ulps for tanh and exp, u = 2^-53 per other
    rounding): t T; e = exp(-2|a|) T (2|a| is exact); 1 + e T + u; its square 2T + 3u;
    sech^2 = 4e / (1 + e)^2 3T + 4u; -2 t sech^2 4T + 5u.  4T + 8 ulps (2^-52) hold all three."""
    with np.errstate(over="ignore", under="ignore"):
        t = np.tanh(a)
        e = np.exp(-2.0 * np.abs(a))
        d1 = 4.0 * e / (1.0 + e) ** 2
        d2 = -2.0 * t * d1
    return (_widened(t, _TANH_POINT_ULPS, -1.0, 1.0), _widened(d1, _TANH_POINT_ULPS, 0.0, 1.0),
            _widened(d2, _TANH_POINT_ULPS))


def _widened(v: np.ndarray, ulps: int, floor: float = -np.inf, ceil: float = np.inf,
             extra: np.ndarray | None = None) -> Interval:
    """v widened by ``ulps`` ulps and TINY (``extra`` more, absolute), clipped to [floor, ceil]:
    the enclosure of a value a point formula computed within that many ulps."""
    lo, hi = iv._widen_down(v, ulps), iv._widen_up(v, ulps)
    if extra is not None:
        lo, hi = iv._down(lo - extra), iv._up(hi + extra)
    return Interval(np.maximum(lo, floor), np.minimum(hi, ceil), check=False)


def _f_sigmoid(x, p) -> Triple:
    s, sc = _sigmoid_pair(x)
    d1 = s * sc
    return s, d1, d1 * (sc - s)


def _f_softplus_smooth(x, p) -> Triple:
    beta = p["beta"]
    z = beta * x
    s, sc = _sigmoid_pair(z)
    # log(1 + e^z) = max(z, 0) + log(1 + e^-|z|); monotone in z, evaluated on tiny intervals only
    value = (iv.maximum(z, 0.0) + iv.log(1.0 + iv.exp(-iv.abs_(z)))) / beta
    return value, s, beta * s * sc


_SOFTPLUS_POINT_ULPS = 2 * iv.TRANSCENDENTAL_ULPS + 6


def _p_softplus_smooth(a: np.ndarray, p) -> Triple:
    """``_f_softplus_smooth`` at the points ``a``, in plain float64 then widened: about 5x
    faster than the interval formula, and each endpoint of every activation's image is such a
    point.  Error count, relative (exp and log1p within TRANSCENDENTAL_ULPS = T ulps, each
    other operation one rounding u = 2^-53): e = exp(-|z|) T; s = 1 / (1 + e) and its mirror
    T + 2u; log1p(e) (log1p(e(1 + d)) - log1p(e) <= d e / (1 + e) <= d log1p(e)) 2T + u;
    max(z, 0) + that, both >= 0, one more u; / beta one more; beta s sc 2T + 6u.  So 2T + 6
    ulps (2^-52 each) and TINY hold all three, when z = beta a is exact (beta = 1).  Else z
    carries u |z| absolute, which exp turns into u |z| relative: |z| ulps more."""
    beta = p["beta"]
    with np.errstate(over="ignore", under="ignore"):
        z = beta * a
        s, sc = 1.0 / (1.0 + np.exp(-z)), 1.0 / (1.0 + np.exp(z))
        value = (np.maximum(z, 0.0) + np.log1p(np.exp(-np.abs(z)))) / beta
        d2 = beta * s * sc
    out = []
    for v in (value, s, d2):
        extra = None
        if beta != 1.0:
            with np.errstate(over="ignore", invalid="ignore"):
                extra = np.nan_to_num(iv._up(np.abs(v) * np.abs(z) * 2.0 ** -52), nan=np.inf)
        out.append(_widened(v, _SOFTPLUS_POINT_ULPS, 0.0, extra=extra))
    return tuple(out)


def _f_silu(x, p) -> Triple:
    s, sc = _sigmoid_pair(x)
    return x * s, s * (1.0 + x * sc), s * sc * (2.0 + x * (sc - s))


def _f_gelu(x, p) -> Triple:
    if p["approximate"] == 0.0:
        cdf = _phi_cdf(x)
        pdf = iv.exp(-0.5 * x ** 2) * INV_SQRT_2PI
        return x * cdf, cdf + x * pdf, pdf * (2.0 - x ** 2)
    u = SQRT_2_OVER_PI * (x + GELU_TANH_COEF * x ** 3)
    du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_TANH_COEF * x ** 2)
    ddu = SQRT_2_OVER_PI * 6.0 * GELU_TANH_COEF * x
    t, sech2 = iv.tanh(u), _sech2(u)
    value = 0.5 * x * (1.0 + t)
    d1 = 0.5 * (1.0 + t) + 0.5 * x * sech2 * du
    d2 = sech2 * du + 0.5 * x * (-2.0 * t * sech2 * du ** 2 + sech2 * ddu)
    return value, d1, d2


def _f_elu_left(x, p) -> Triple:
    a = p["alpha"]
    e = iv.exp(x)
    return a * (e - 1.0), a * e, a * e


def _linear(slope: float, offset: float = 0.0):
    def f(x, p) -> Triple:
        value = x if (slope == 1.0 and offset == 0.0) else slope * x + offset
        return value, Interval.point(np.full(x.shape, slope)), Interval.point(np.zeros(x.shape))
    return f


def _constant(value_of: Callable[[dict], float]):
    def f(x, p) -> Triple:
        zero = np.zeros(x.shape)
        return Interval.point(zero + value_of(p)), Interval.point(zero), Interval.point(zero)
    return f


# --- pieces ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Piece:
    """A smooth piece on (previous kink, next kink]; ``crits[k]`` lists the critical points of
    sigma^(k) on the piece (every local extremum of that derivative)."""
    formula: Callable[[Interval, dict], Triple]
    crits: tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]] = ((), (), ())
    at_points: Callable[[np.ndarray, dict], Triple] | None = None    # the formula at points, faster


Kink = tuple[float, float, bool]     # (lo, hi, owned by the right piece at an exact kink point)


def _no_kinks(p: dict, float32: bool) -> tuple[Kink, ...]:
    return ()


def _exact_kink(k: float):
    return lambda p, float32: ((k, k, False),)


@dataclass(frozen=True)
class PiecewiseEnclosure:
    """Smooth pieces separated by kinks. ``kinks(params, float32)`` gives each kink as
    (lo, hi, right_owned): an interval holding every position the evaluated code may switch
    at, and which piece's convention holds exactly at the kink (compiler.activations: a > 0
    selects ReLU's right piece, so 0 belongs to the left; Hardtanh's derivative is 0 at both
    bounds, so min_val belongs to the left piece and max_val to the right one)."""
    pieces: Callable[[dict], tuple[Piece, ...]]
    kinks: Callable[[dict, bool], tuple[Kink, ...]] = _no_kinks

    def __call__(self, x: Interval, params: dict, float32: bool = False) -> Triple:
        kinks = self.kinks(params, float32)
        lefts = [(-np.inf, -np.inf, True)] + list(kinks)
        rights = list(kinks) + [(np.inf, np.inf, False)]
        acc = [Interval(np.full(x.shape, np.inf), np.full(x.shape, -np.inf), check=False) for _ in range(3)]
        for piece, (a_lo, a_hi, a_right), (b_lo, b_hi, b_right) in zip(self.pieces(params), lefts, rights):
            # the piece holds on (a, b), plus a kink's point where it owns it (or the kink is fuzzy)
            left_ok = (x.hi >= a_lo) if (a_right or a_lo < a_hi) else (x.hi > a_lo)
            right_ok = (x.lo <= b_hi) if (not b_right or b_lo < b_hi) else (x.lo < b_hi)
            touched = left_ok & right_ok
            lo, hi = np.clip(x.lo, a_lo, b_hi), np.clip(x.hi, a_lo, b_hi)
            part = _piece_image(piece, Interval(np.where(touched, lo, 0.0), np.where(touched, hi, 0.0),
                                                check=False), params)
            acc = [_masked_hull(a, q, touched) for a, q in zip(acc, part)]
        return tuple(acc)


def _masked_hull(acc: Interval, part: Interval, mask: np.ndarray) -> Interval:
    return Interval(np.where(mask, np.minimum(acc.lo, part.lo), acc.lo),
                    np.where(mask, np.maximum(acc.hi, part.hi), acc.hi), check=False)


def _piece_image(piece: Piece, x: Interval, params: dict) -> Triple:
    """Hull of sigma^(k) at both endpoints and at critical points inside, for k = 0, 1, 2."""
    if piece.at_points is not None:
        at_lo, at_hi = piece.at_points(x.lo, params), piece.at_points(x.hi, params)
    else:
        at_lo, at_hi = piece.formula(Interval.point(x.lo), params), piece.formula(Interval.point(x.hi), params)
    out = []
    for k in range(3):
        lo = np.minimum(at_lo[k].lo, at_hi[k].lo)
        hi = np.maximum(at_lo[k].hi, at_hi[k].hi)
        for c in piece.crits[k]:
            inside = (x.lo <= c + CRIT_SLACK) & (x.hi >= c - CRIT_SLACK)
            if np.any(inside):
                crit = piece.formula(Interval(np.array([c - CRIT_SLACK]), np.array([c + CRIT_SLACK])), params)[k]
                lo = np.where(inside, np.minimum(lo, crit.lo), lo)
                hi = np.where(inside, np.maximum(hi, crit.hi), hi)
        out.append(Interval(lo, hi, check=False))
    return tuple(out)


def _fuzzy(k: float, k32: float, relative: float = 0.0):
    """An interval holding the exact kink k, its float32 position k32, and a relative fuzz."""
    lo, hi = min(k, k32), max(k, k32)
    return (float(np.nextafter(lo - relative * abs(lo), -np.inf)),
            float(np.nextafter(hi + relative * abs(hi), np.inf)), False)


def _f32(v: float) -> float:
    return float(np.float32(v))


def _softplus_kinks(p: dict, float32: bool):
    """float64: fl(beta a) > threshold; float32: fl(fl32(beta) a) > fl32(threshold)."""
    k = p["threshold"] / p["beta"]
    if float32:
        return (_fuzzy(k, _f32(p["threshold"]) / _f32(p["beta"]), 4 * U32),)
    return (_fuzzy(k, k, 4 * 2.0 ** -53),)


def _hardtanh_kinks(p: dict, float32: bool):
    if float32:
        return (_fuzzy(p["min_val"], _f32(p["min_val"])), _fuzzy(p["max_val"], _f32(p["max_val"])))
    return ((p["min_val"], p["min_val"], False), (p["max_val"], p["max_val"], True))


TANH_D2_CRIT = math.atanh(1 / math.sqrt(3))            # 0.658478948462408...
SIGMOID_D2_CRIT = math.log(2 + math.sqrt(3))          # 1.316957896924816...

ENCLOSURES: dict[str, PiecewiseEnclosure] = {
    "relu": PiecewiseEnclosure(lambda p: (Piece(_constant(lambda p: 0.0)), Piece(_linear(1.0))),
                               _exact_kink(0.0)),
    "leaky_relu": PiecewiseEnclosure(
        lambda p: (Piece(_linear(p["negative_slope"])), Piece(_linear(1.0))), _exact_kink(0.0)),
    "hardtanh": PiecewiseEnclosure(
        lambda p: (Piece(_constant(lambda p: p["min_val"])), Piece(_linear(1.0)), Piece(_constant(lambda p: p["max_val"]))),
        _hardtanh_kinks),
    "elu": PiecewiseEnclosure(lambda p: (Piece(_f_elu_left), Piece(_linear(1.0))), _exact_kink(0.0)),
    "tanh": PiecewiseEnclosure(lambda p: (Piece(_f_tanh, ((), (0.0,), (-TANH_D2_CRIT, TANH_D2_CRIT)), _p_tanh),)),
    "sigmoid": PiecewiseEnclosure(lambda p: (Piece(_f_sigmoid, ((), (0.0,), (-SIGMOID_D2_CRIT, SIGMOID_D2_CRIT))),)),
    "softplus": PiecewiseEnclosure(
        lambda p: (Piece(_f_softplus_smooth, ((), (), (0.0,)), _p_softplus_smooth), Piece(_linear(1.0))),
        _softplus_kinks),
    "silu": PiecewiseEnclosure(lambda p: (Piece(_f_silu, (
        (-1.2784645427610737951,), (-2.3993572805154676678, 2.3993572805154676678),
        (-3.435840993535110689, 0.0, 3.435840993535110689))),)),
    "gelu": PiecewiseEnclosure(lambda p: (Piece(_f_gelu, (
        (-0.75179152469356445746,), (-math.sqrt(2), math.sqrt(2)), (-2.0, 0.0, 2.0))
        if p["approximate"] == 0.0 else (
        (-0.75246142207101625849,), (-1.4185040087908283555, 1.4185040087908283555),
        (-2.0134807246242579281, 0.0, 2.0134807246242579281))),)),
    "identity": PiecewiseEnclosure(lambda p: (Piece(_linear(1.0)),)),
}


# --- float32 header: evaluation error of each activation's C++ body (compiler/cpp_activations.py)
# sup over the reals of |sigma'''| (for carrying an input error through sigma''), x1.1 margin
THIRD_DERIVATIVE_BOUND: dict[str, Callable[[dict], float]] = {
    "relu": lambda p: 0.0, "leaky_relu": lambda p: 0.0, "hardtanh": lambda p: 0.0, "identity": lambda p: 0.0,
    "elu": lambda p: 1.1 * abs(p["alpha"]),
    "tanh": lambda p: 2.2, "sigmoid": lambda p: 0.14, "silu": lambda p: 0.34,
    "softplus": lambda p: 0.11 * p["beta"] ** 2,
    "gelu": lambda p: 0.86,           # both forms (0.779 exact, 0.777 tanh)
}


def float32_error(kind: str, params: dict, a_mag: np.ndarray, mags: tuple) -> tuple:
    """Bounds on |computed - exact| of (sigma, sigma', sigma'') for the header's float32 body
    at a float32 input a (|a| <= a_mag; mags = max |sigma^(k)| over the input interval), in
    absolute terms. Derived by counting roundings (u = 2^-24 each) and cppmath's asserted
    ulp bounds (exp, expm1, log1p 1 ulp; erf 2 ulp; 1 ulp <= 2u relative) through each body,
    then doubled; tests/test_bounds.py re-measures them on the compiled header."""
    u = U32
    m0, m1, m2 = mags
    zero = np.zeros_like(a_mag)
    if kind in ("relu", "identity"):
        return zero, zero, zero
    if kind == "hardtanh":
        return u * m0, zero, zero                      # clipping to float32-rounded bounds
    if kind == "leaky_relu":
        return 6 * u * m0, 2 * u * m1, zero
    if kind == "elu":
        al = abs(params["alpha"])
        return 8 * u * m0, u * (6 * m1 + 6 * al), u * (6 * m2 + 6 * al)
    if kind == "tanh":                                 # t rel 7u; sech2 = 4(em+1)/den^2 abs 23u
        return 14 * u * m0, 48 * u + zero, 64 * u + zero
    if kind == "sigmoid":                              # s, sc rel 7u each
        return 14 * u * m0, 30 * u * m1, u * (32 * m2 + 16 * m1)
    if kind == "softplus":
        b = params["beta"]
        return u * (16 * m0 + 8 / b), u * (16 * m1 + 8), u * (32 * m2 + 8 * b)
    if kind == "silu":
        return 16 * u * m0, u * (4 * m1 + 48), u * (32 * m2 + 24)
    if kind == "gelu" and params["approximate"] == 0.0:
        return u * (4 * m0 + 48), u * (8 * m1 + 32), u * (16 * m2 + 16)
    if kind == "gelu":                                 # sech2 abs error ~4u times a du, du^2 a in the
        a = np.minimum(a_mag, 7.0)                     # band |u| < 9.5 where expm1 can leave -1
        du = SQRT_2_OVER_PI * (1 + 3 * GELU_TANH_COEF * a * a)
        band = a_mag <= 7.0
        return (u * (4 * m0 + 48),
                u * (8 * m1 + 32 + np.where(band, 16 * a * du, 0.0)),
                u * (16 * m2 + 32 + np.where(band, 32 * (du + a * du * du + a * a), 0.0)))
    raise KeyError(kind)
