"""Batched interval arithmetic in float64 that stays sound under floating point.

An ``Interval`` holds two float64 arrays ``lo`` and ``hi`` of one shape (a batch of
boxes, or of scalars), lo <= hi. Every operation returns an enclosure of the exact real
image, rounded outward:

* ``+ - * /`` and ``sqrt`` are correctly rounded in IEEE arithmetic, so moving each
  computed bound one ulp outward is enough (done as x +- (|x| 2^-52 + 2^-1074), which lands
  at or beyond ``np.nextafter`` and is ten times faster).
* numpy's exp, log, sin, cos, tan, tanh, atan and ``power`` with a float exponent are not
  correctly rounded (up to ~4 ulp in the SIMD kernels), so their results are widened by
  ``TRANSCENDENTAL_ULPS`` ulps plus ``TINY`` absolute.
* dot products with a point matrix (``matmul``) use the mid-radius form with Higham's
  bound |fl(x.w) - x.w| <= gamma_n |x|.|w|, gamma_n = n u / (1 - n u), u = 2^-53,
  valid for any summation order; the bound itself is rounded up.

Conventions: 0 * [-inf, inf] = 0; division by an interval containing 0 gives the
entire real line [-inf, inf]; ``sqrt``, ``log`` and float powers are the image of the
part of the interval inside their domain (a box wholly outside it raises
``IntervalDomainError``). Everything is vectorised over the batch: no Python loop
over boxes.

``NAMESPACE`` maps sympy's printed names to these functions, so
``sympy.lambdify(args, expr, modules=[NAMESPACE])`` gives an interval evaluator
(``pi`` and ``E`` are enclosures, not rounded floats).
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence, Union

import numpy as np

from .errors import CompilerError

Number = Union[int, float, np.ndarray]

U64 = 2.0 ** -53                 # unit roundoff of float64
TRANSCENDENTAL_ULPS = 8          # widening of numpy's non-correctly-rounded functions
TINY = 2.0 ** -1000              # absolute widening: covers underflow and results near 0
_INF = np.inf
_MAX = float(np.finfo(np.float64).max)
_MIN_SUBNORMAL = 5e-324


class IntervalDomainError(CompilerError, ValueError):
    """An interval function applied wholly outside its domain (e.g. log of [-2, -1])."""


def gamma(n: int, unit: float = U64) -> float:
    """Higham's gamma_n = n u / (1 - n u), rounded up (one extra ulp covers its own rounding)."""
    nu = n * unit
    if nu >= 0.5:
        raise ValueError(f"gamma_{n} is undefined for unit roundoff {unit}: n u >= 1/2")
    return float(np.nextafter(np.nextafter(nu / (1.0 - nu), _INF), _INF))


def _step(x: np.ndarray) -> np.ndarray:
    """|x| 2^-52 + 2^-1074: at least the spacing of the floats next to x on either side, so
    x +- step rounds (to nearest) at or beyond np.nextafter(x, +-inf), about 10x faster."""
    step = np.abs(x)
    step *= 2.0 ** -52
    step += _MIN_SUBNORMAL
    return step


def _down(x: np.ndarray) -> np.ndarray:
    """A float at or below the float before x (never above the real value x was rounded from)."""
    with np.errstate(invalid="ignore", over="ignore"):
        out = x - _step(x)
    if np.isnan(np.sum(out)):                   # +inf - inf: an overflowed value exceeds MAX only
        out = np.where(np.isnan(out), np.where(x == _INF, _MAX, x), out)
    return out


def _up(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        out = x + _step(x)
    if np.isnan(np.sum(out)):
        out = np.where(np.isnan(out), np.where(x == -_INF, -_MAX, x), out)
    return out


def _widen_down(x: np.ndarray, ulps: int = TRANSCENDENTAL_ULPS) -> np.ndarray:
    """x lowered by ``ulps`` ulps of x (plus one for the subtraction) and TINY: a lower bound
    for a result accurate to ``ulps`` ulps; an overflowed +inf becomes MAX."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = x - (np.abs(x) * ((ulps + 1) * 2.0 ** -52) + TINY)
    if not np.isfinite(np.sum(out)):
        out = np.where(np.isnan(out), x, out)
        out = np.where(out == _INF, _MAX, out)
    return out


def _widen_up(x: np.ndarray, ulps: int = TRANSCENDENTAL_ULPS) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        out = x + (np.abs(x) * ((ulps + 1) * 2.0 ** -52) + TINY)
    if not np.isfinite(np.sum(out)):
        out = np.where(np.isnan(out), x, out)
        out = np.where(out == -_INF, -_MAX, out)
    return out


def _arr(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


class Interval:
    """A batch of closed intervals [lo, hi] (float64 arrays of one shape)."""

    __slots__ = ("lo", "hi")
    __array_ufunc__ = None        # ndarray (op) Interval defers to Interval's reflected operator

    def __init__(self, lo, hi=None, *, check: bool = True):
        lo = _arr(lo)
        hi = lo if hi is None else _arr(hi)
        if lo.shape != hi.shape:
            lo, hi = np.broadcast_arrays(lo, hi)
        if check:
            bad = ~(lo <= hi)
            if np.any(bad):
                i = tuple(np.argwhere(bad)[0].tolist())
                raise ValueError(f"interval lower bound exceeds upper bound (or is NaN) at {i}: "
                                 f"[{lo[i]}, {hi[i]}]")
        self.lo = lo
        self.hi = hi

    # --- constructors -------------------------------------------------------------
    @classmethod
    def point(cls, x) -> "Interval":
        """The degenerate interval [x, x] (x is exact: float64 values are exact reals).
        lo and hi are the same array object, which products use as a fast path."""
        x = _arr(x)
        return cls(x, x, check=False)

    @classmethod
    def stack(cls, items: Sequence, axis: int = 0) -> "Interval":
        """Stack Intervals and/or numbers along a new axis (like np.stack)."""
        ivs = [as_interval(it) for it in items]
        shape = np.broadcast_shapes(*(iv.shape for iv in ivs))
        los = [np.broadcast_to(iv.lo, shape) for iv in ivs]
        his = [np.broadcast_to(iv.hi, shape) for iv in ivs]
        return cls(np.stack(los, axis), np.stack(his, axis), check=False)

    @classmethod
    def concatenate(cls, items: Sequence["Interval"], axis: int = 0) -> "Interval":
        ivs = [as_interval(it) for it in items]
        return cls(np.concatenate([iv.lo for iv in ivs], axis),
                   np.concatenate([iv.hi for iv in ivs], axis), check=False)

    # --- shape ----------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.lo.shape

    @property
    def ndim(self) -> int:
        return self.lo.ndim

    def __len__(self) -> int:
        return len(self.lo)

    def __getitem__(self, index) -> "Interval":
        return Interval(self.lo[index], self.hi[index], check=False)

    def __setitem__(self, index, value) -> None:
        value = as_interval(value)
        if self.lo is self.hi:                 # a point interval shares one array
            self.hi = self.hi.copy()
        self.lo[index] = value.lo
        self.hi[index] = value.hi

    def reshape(self, *shape) -> "Interval":
        return Interval(self.lo.reshape(*shape), self.hi.reshape(*shape), check=False)

    def broadcast_to(self, shape) -> "Interval":
        return Interval(np.broadcast_to(self.lo, shape), np.broadcast_to(self.hi, shape), check=False)

    def swapaxes(self, a: int, b: int) -> "Interval":
        return Interval(self.lo.swapaxes(a, b), self.hi.swapaxes(a, b), check=False)

    def copy(self) -> "Interval":
        return Interval(self.lo.copy(), self.hi.copy(), check=False)

    def __repr__(self) -> str:
        if self.lo.size <= 6:
            return f"Interval(lo={self.lo!r}, hi={self.hi!r})"
        return f"Interval(shape={self.shape})"

    # --- properties -----------------------------------------------------------------
    @property
    def mid(self) -> np.ndarray:
        """A point near the centre; [mid - rad, mid + rad] contains the interval."""
        with np.errstate(invalid="ignore"):
            m = 0.5 * self.lo + 0.5 * self.hi
        if np.isfinite(np.sum(m)):
            return m
        return np.where(np.isfinite(m), m, np.where(np.isfinite(self.lo), self.lo,
                                                    np.where(np.isfinite(self.hi), self.hi, 0.0)))

    @property
    def rad(self) -> np.ndarray:
        """Radius around ``mid``, rounded up so that [mid - rad, mid + rad] contains [lo, hi]."""
        m = self.mid
        with np.errstate(invalid="ignore", over="ignore"):
            return _up(np.maximum(self.hi - m, m - self.lo))

    @property
    def width(self) -> np.ndarray:
        """hi - lo, rounded up."""
        with np.errstate(invalid="ignore", over="ignore"):
            return _up(self.hi - self.lo)

    @property
    def mag(self) -> np.ndarray:
        """max |x| over the interval."""
        return np.maximum(np.abs(self.lo), np.abs(self.hi))

    # --- set operations -------------------------------------------------------------
    def hull(self, other) -> "Interval":
        other = as_interval(other)
        return Interval(np.minimum(self.lo, other.lo), np.maximum(self.hi, other.hi), check=False)

    def intersect(self, other) -> "Interval":
        """Intersection; raises ValueError where it is empty (two enclosures of one value never are)."""
        other = as_interval(other)
        lo, hi = np.maximum(self.lo, other.lo), np.minimum(self.hi, other.hi)
        empty = ~(lo <= hi)
        if np.any(empty):
            i = tuple(np.argwhere(empty)[0].tolist())
            a_lo, a_hi, b_lo, b_hi = (np.broadcast_to(v, lo.shape)[i] for v in (self.lo, self.hi, other.lo, other.hi))
            raise ValueError(f"empty intersection at {i}: [{a_lo}, {a_hi}] and [{b_lo}, {b_hi}]")
        return Interval(lo, hi, check=False)

    def contains(self, points) -> np.ndarray:
        """Elementwise lo <= p <= hi (broadcasting)."""
        p = _arr(points)
        return (self.lo <= p) & (p <= self.hi)

    def subset(self, other) -> np.ndarray:
        """Elementwise: self lies inside other."""
        other = as_interval(other)
        return (other.lo <= self.lo) & (self.hi <= other.hi)

    def contains_zero(self) -> np.ndarray:
        return (self.lo <= 0.0) & (self.hi >= 0.0)

    # --- arithmetic -----------------------------------------------------------------
    def __neg__(self) -> "Interval":
        return Interval(-self.hi, -self.lo, check=False)

    def __pos__(self) -> "Interval":
        return self

    def __add__(self, other) -> "Interval":
        other = as_interval(other)
        with np.errstate(invalid="ignore", over="ignore"):
            return Interval(_down(self.lo + other.lo), _up(self.hi + other.hi), check=False)

    __radd__ = __add__

    def __sub__(self, other) -> "Interval":
        other = as_interval(other)
        with np.errstate(invalid="ignore", over="ignore"):
            return Interval(_down(self.lo - other.hi), _up(self.hi - other.lo), check=False)

    def __rsub__(self, other) -> "Interval":
        return as_interval(other) - self

    def __mul__(self, other) -> "Interval":
        other = as_interval(other)
        with np.errstate(invalid="ignore", over="ignore"):
            if other.lo is other.hi:                         # a point factor: two products
                p = [self.lo * other.lo, self.hi * other.lo]
            elif self.lo is self.hi:
                p = [self.lo * other.lo, self.lo * other.hi]
            else:
                p = [self.lo * other.lo, self.lo * other.hi, self.hi * other.lo, self.hi * other.hi]
        lo, hi = _min_max(p)
        if np.isnan(np.sum(lo)) or np.isnan(np.sum(hi)):     # some 0 * inf: it is 0
            lo, hi = _min_max([np.where(np.isnan(q), 0.0, q) for q in p])
        return Interval(_down(lo), _up(hi), check=False)

    __rmul__ = __mul__

    def __truediv__(self, other) -> "Interval":
        other = as_interval(other)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            if other.lo is other.hi:
                q = [self.lo / other.lo, self.hi / other.lo]
            else:
                q = [self.lo / other.lo, self.lo / other.hi, self.hi / other.lo, self.hi / other.hi]
        lo, hi = _min_max(q)
        if np.isnan(np.sum(lo)) or np.isnan(np.sum(hi)):     # inf / inf (0 excluded): the hull holds it
            lo, hi = _min_max([np.where(np.isnan(v), 0.0, v) for v in q])
        zero = other.contains_zero()
        return Interval(np.where(zero, -_INF, _down(lo)), np.where(zero, _INF, _up(hi)), check=False)

    def __rtruediv__(self, other) -> "Interval":
        return as_interval(other) / self

    def __pow__(self, exponent) -> "Interval":
        if isinstance(exponent, Interval):
            raise TypeError("interval ** interval is not supported; use exp(y * log(x))")
        e = float(exponent)
        if e.is_integer() and abs(e) < 2 ** 31:
            return _int_power(self, int(e))
        return _float_power(self, e)

    def __abs__(self) -> "Interval":
        return abs_(self)

    def sum(self, axis: int = -1) -> "Interval":
        """Sum along ``axis`` with the summation error bound gamma_{n-1} sum|x|."""
        n = self.shape[axis]
        if n <= 1:
            return Interval(np.sum(self.lo, axis), np.sum(self.hi, axis), check=False)
        g = 2.0 * gamma(n)
        with np.errstate(invalid="ignore", over="ignore"):
            lo = np.sum(self.lo, axis)
            hi = np.sum(self.hi, axis)
            lo = _down(lo - _up(g * np.sum(np.abs(self.lo), axis)))
            hi = _up(hi + _up(g * np.sum(np.abs(self.hi), axis)))
        return Interval(lo, hi, check=False)


def _min_max(products: list) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = products[0], products[0]
    for q in products[1:]:
        lo, hi = np.minimum(lo, q), np.maximum(hi, q)
    return lo, hi


def as_interval(x) -> Interval:
    """An Interval unchanged; a number or array as the degenerate interval [x, x]."""
    if isinstance(x, Interval):
        return x
    return Interval.point(x)


# --- powers ---------------------------------------------------------------------------
def _mul_nonneg(a_lo, a_hi, b_lo, b_hi):
    """[a_lo, a_hi] * [b_lo, b_hi] for nonnegative intervals, rounded outward."""
    with np.errstate(over="ignore"):
        return _down(a_lo * b_lo), _up(a_hi * b_hi)


def _power_nonneg(lo: np.ndarray, hi: np.ndarray, n: int):
    """[lo, hi] ** n for 0 <= lo <= hi, n >= 1, by binary powering with directed rounding."""
    r_lo = r_hi = None
    b_lo, b_hi = lo, hi
    while n:
        if n & 1:
            if r_lo is None:
                r_lo, r_hi = b_lo, b_hi
            else:
                r_lo, r_hi = _mul_nonneg(r_lo, r_hi, b_lo, b_hi)
        n >>= 1
        if n:
            b_lo, b_hi = _mul_nonneg(b_lo, b_hi, b_lo, b_hi)
    return np.maximum(r_lo, 0.0), r_hi


def _int_power(x: Interval, n: int) -> Interval:
    if n == 0:
        return Interval.point(np.ones_like(x.lo))
    if n < 0:
        return 1.0 / _int_power(x, -n)
    a = abs_(x)
    p_lo, p_hi = _power_nonneg(a.lo, a.hi, n)
    if n % 2 == 0:
        return Interval(p_lo, p_hi, check=False)
    # odd: monotone increasing; x^n = sign(x) |x|^n at each endpoint
    lo_mag = _power_nonneg(np.abs(x.lo), np.abs(x.lo), n)
    hi_mag = _power_nonneg(np.abs(x.hi), np.abs(x.hi), n)
    lo = np.where(x.lo >= 0, lo_mag[0], -lo_mag[1])
    hi = np.where(x.hi >= 0, hi_mag[1], -hi_mag[0])
    return Interval(lo, hi, check=False)


def _domain_part(x: Interval, lower: float, name: str, strict: bool = False) -> Interval:
    """The part of x at or above ``lower`` (above, if strict); error where it is empty."""
    outside = (x.hi <= lower) if strict else (x.hi < lower)
    if np.any(outside):
        i = tuple(np.argwhere(outside)[0].tolist())
        raise IntervalDomainError(f"{name} of an interval outside its domain at {i}: [{x.lo[i]}, {x.hi[i]}]")
    return Interval(np.maximum(x.lo, lower), x.hi, check=False)


def _float_power(x: Interval, e: float) -> Interval:
    """x ** e for a non-integer exponent: defined for x >= 0 (x > 0 if e < 0), monotone."""
    x = _domain_part(x, 0.0, f"power {e}", strict=e < 0)
    with np.errstate(divide="ignore", over="ignore"):
        a, b = np.power(x.lo, e), np.power(x.hi, e)
    if e > 0:
        return Interval(np.maximum(_widen_down(a), 0.0), _widen_up(b), check=False)
    return Interval(np.maximum(_widen_down(b), 0.0), _widen_up(a), check=False)


# --- elementary functions ---------------------------------------------------------------
def monotone(fn, x: Interval, lower: float = -_INF, upper: float = _INF) -> Interval:
    """Image of a nondecreasing numpy function that is accurate to a few ulps but not correctly
    rounded (widened by TRANSCENDENTAL_ULPS and TINY), clipped to its range [lower, upper]."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        lo, hi = fn(x.lo), fn(x.hi)
    return Interval(np.clip(_widen_down(lo), lower, upper), np.clip(_widen_up(hi), lower, upper),
                    check=False)


def abs_(x) -> Interval:
    """|x|: tight (0 when the interval contains 0)."""
    x = as_interval(x)
    lo = np.where(x.lo >= 0, x.lo, np.where(x.hi <= 0, -x.hi, 0.0))
    return Interval(lo, x.mag, check=False)


def sqrt(x) -> Interval:
    """Correctly rounded, so one ulp outward; the part of x below 0 is outside the domain."""
    x = _domain_part(as_interval(x), 0.0, "sqrt")
    return Interval(np.maximum(_down(np.sqrt(x.lo)), 0.0), _up(np.sqrt(x.hi)), check=False)


def exp(x) -> Interval:
    return monotone(np.exp, as_interval(x), lower=0.0)


def log(x) -> Interval:
    x = _domain_part(as_interval(x), 0.0, "log", strict=True)
    return monotone(np.log, x)


def tanh(x) -> Interval:
    return monotone(np.tanh, as_interval(x), -1.0, 1.0)


_PI_HI = float(np.nextafter(math.pi, _INF))     # math.pi < pi < its successor
_HALF_PI_HI = float(np.nextafter(math.pi / 2, _INF))


def atan(x) -> Interval:
    return monotone(np.arctan, as_interval(x), -_HALF_PI_HI, _HALF_PI_HI)


def _hits(lo: np.ndarray, hi: np.ndarray, offset: float, period: float) -> np.ndarray:
    """Whether some offset + k period lies in [lo, hi] (conservative: may say yes when
    a point lies just outside, never no when one is inside)."""
    with np.errstate(invalid="ignore", over="ignore"):
        k0 = np.floor((lo - offset) / period)
        slack = 1e-12 * (1.0 + np.abs(lo) + np.abs(hi))
        hit = np.zeros(lo.shape, dtype=bool)
        for dk in (-1.0, 0.0, 1.0, 2.0):
            c = offset + (k0 + dk) * period
            hit |= (c >= lo - slack) & (c <= hi + slack)
    return hit


def _periodic(fn, x: Interval, max_at: float, min_at: float) -> Interval:
    """Image of sin or cos: endpoint values, plus +-1 where a maximum/minimum point is inside."""
    x = as_interval(x)
    two_pi = 2.0 * math.pi
    with np.errstate(invalid="ignore"):
        a, b = fn(x.lo), fn(x.hi)
    lo = _widen_down(np.minimum(a, b))
    hi = _widen_up(np.maximum(a, b))
    wide = ~((x.hi - x.lo) < 6.0) | ~np.isfinite(x.lo) | ~np.isfinite(x.hi)   # 6 < 2 pi: safe
    hi = np.where(wide | _hits(x.lo, x.hi, max_at, two_pi), 1.0, np.minimum(hi, 1.0))
    lo = np.where(wide | _hits(x.lo, x.hi, min_at, two_pi), -1.0, np.maximum(lo, -1.0))
    return Interval(lo, hi, check=False)


def sin(x) -> Interval:
    return _periodic(np.sin, x, math.pi / 2, -math.pi / 2)


def cos(x) -> Interval:
    return _periodic(np.cos, x, 0.0, math.pi)


def tan(x) -> Interval:
    """Monotone between poles; the entire line where a pole pi/2 + k pi may be inside."""
    x = as_interval(x)
    out = monotone(np.tan, x)
    pole = _hits(x.lo, x.hi, math.pi / 2, math.pi) | ~((x.hi - x.lo) < 3.0)
    return Interval(np.where(pole, -_INF, out.lo), np.where(pole, _INF, out.hi), check=False)


def minimum(a, b, *rest) -> Interval:
    """min of two or more intervals (sympy prints Min(a, b, c) with every argument)."""
    a, b = as_interval(a), as_interval(b)
    out = Interval(np.minimum(a.lo, b.lo), np.minimum(a.hi, b.hi), check=False)
    return minimum(out, *rest) if rest else out


def maximum(a, b, *rest) -> Interval:
    """max of two or more intervals (sympy prints Max(a, b, c) with every argument)."""
    a, b = as_interval(a), as_interval(b)
    out = Interval(np.maximum(a.lo, b.lo), np.maximum(a.hi, b.hi), check=False)
    return maximum(out, *rest) if rest else out


def matmul(x, w: np.ndarray) -> Interval:
    """x @ w for an interval x (..., k) and a point matrix w (k, m), mid-radius with
    Higham's bound: result in c @ w +- [(r @ |w| + gamma_k |c| @ |w|)(1 + 2 gamma_k)]
    (the factor covers the rounding of the two nonnegative products), plus TINY k for
    underflow; every bound rounded outward."""
    x = as_interval(x)
    w = _arr(w)
    k = w.shape[0]
    g = gamma(k + 2)
    c, r = x.mid, x.rad
    aw = np.abs(w)
    with np.errstate(invalid="ignore", over="ignore"):
        centre = c @ w
        # (r + g|c|) is formed with two roundings (< 3u relative): covered by the 4u below
        err = ((r + g * np.abs(c)) @ aw) * (1.0 + 2.0 * g + 4.0 * U64) + TINY * k
        err = _up(_up(err))
        return Interval(_down(centre - err), _up(centre + err), check=False)


def dot_sum(items: Iterable[Interval]) -> Interval:
    """Sum of a few Intervals (each addition rounded outward)."""
    total = None
    for item in items:
        total = item if total is None else total + item
    if total is None:
        raise ValueError("dot_sum of nothing")
    return as_interval(total)


PI = Interval(math.pi, _PI_HI)
E = Interval(float(np.nextafter(math.e, -_INF)), float(np.nextafter(math.e, _INF)))

NAMESPACE: dict = {
    "sin": sin, "cos": cos, "tan": tan, "atan": atan, "exp": exp, "log": log,
    "sqrt": sqrt, "tanh": tanh, "abs": abs_, "Abs": abs_,
    "min": minimum, "Min": minimum, "max": maximum, "Max": maximum,
    "pi": PI, "E": E,
}
