"""compiler.interval against mpmath at 60 digits: every operation's enclosure contains the
exact image of random points inside its arguments, and is tight where the image is known."""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from compiler import interval as iv
from compiler.interval import Interval

mpmath.mp.dps = 60
N = 150


def random_intervals(rng, n, scale=(-3, 3), positive=False):
    """Intervals of widely spread magnitudes and widths (zero, tiny, unit, huge)."""
    centre = rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(*scale, n)
    if positive:
        centre = np.abs(centre)
    width = np.abs(centre) * 10.0 ** rng.uniform(-15, 1, n) * rng.choice([0.0, 1.0, 1.0, 1.0], n)
    lo = centre - width * rng.uniform(0, 1, n)
    hi = lo + width
    if positive:
        lo = np.maximum(lo, np.abs(centre) * 1e-3)
        hi = np.maximum(hi, lo)
    return Interval(lo, hi)


def points_in(rng, x: Interval):
    """Endpoints and one random point of each interval (float64, so exact reals)."""
    t = rng.uniform(0, 1, x.shape)
    inner = np.clip(x.lo + t * (x.hi - x.lo), x.lo, x.hi)
    return [x.lo, x.hi, inner]


def assert_encloses(result: Interval, exact_values, what: str):
    """Each exact (mpmath) value lies in [lo, hi], compared in mpmath (no float rounding)."""
    for i, value in enumerate(exact_values):
        lo, hi = result.lo.flat[i], result.hi.flat[i]
        assert mpmath.mpf(lo) <= value <= mpmath.mpf(hi), f"{what}: {value} not in [{lo!r}, {hi!r}] (entry {i})"


UNARY = {
    "sin": (iv.sin, mpmath.sin, {}),
    "cos": (iv.cos, mpmath.cos, {}),
    "tan": (iv.tan, mpmath.tan, {"scale": (-3, 0.5)}),
    "atan": (iv.atan, mpmath.atan, {}),
    "exp": (iv.exp, mpmath.exp, {"scale": (-3, 2.5)}),
    "log": (iv.log, mpmath.log, {"positive": True}),
    "sqrt": (iv.sqrt, mpmath.sqrt, {"positive": True}),
    "tanh": (iv.tanh, mpmath.tanh, {}),
    "abs": (iv.abs_, abs, {}),
    "neg": (lambda x: -x, lambda v: -v, {}),
    "pow2": (lambda x: x ** 2, lambda v: v ** 2, {}),
    "pow3": (lambda x: x ** 3, lambda v: v ** 3, {}),
    "pow4": (lambda x: x ** 4, lambda v: v ** 4, {}),
    "pow-1": (lambda x: x ** -1, lambda v: 1 / v if v != 0 else None, {}),
    "pow0.5": (lambda x: x ** 0.5, lambda v: mpmath.sqrt(v), {"positive": True}),
    "pow1.7": (lambda x: x ** 1.7, lambda v: v ** mpmath.mpf(1.7), {"positive": True}),
    "pow-2.5": (lambda x: x ** -2.5, lambda v: v ** mpmath.mpf(-2.5), {"positive": True}),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_function_encloses_exact_image_of_every_point(name):
    fn, exact, kw = UNARY[name]
    rng = np.random.default_rng(abs(hash(name)) % 2 ** 32)
    x = random_intervals(rng, N, **kw)
    result = fn(x)
    assert np.all(result.lo <= result.hi)
    for p in points_in(rng, x):
        values = [exact(mpmath.mpf(v)) for v in p]
        keep = [i for i, v in enumerate(values) if v is not None]
        # tan: skip points within 1e-10 of a pole (their value is unrepresentable anyway)
        assert_encloses(result[np.array(keep)], [values[i] for i in keep], name)


BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a / b, lambda a, b: a / b if b != 0 else None),
}


@pytest.mark.parametrize("side", ["interval-interval", "number-left", "number-right", "point-left"])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_operation_encloses_exact_result_of_every_pair_of_points(name, side):
    op, exact = BINARY[name]
    rng = np.random.default_rng(7 + len(name))
    a, b = random_intervals(rng, N), random_intervals(rng, N)
    if side == "number-left":
        a = Interval.point(a.lo)
        result = op(a.lo, b)            # ndarray on the left
    elif side == "number-right":
        b = Interval.point(b.hi)
        result = op(a, b.hi)
    elif side == "point-left":              # a degenerate Interval times an interval
        a = Interval.point(a.lo)
        result = op(a, b)
    else:
        result = op(a, b)
    for pa, pb in zip(points_in(rng, a), reversed(points_in(rng, b))):
        values = [exact(mpmath.mpf(x), mpmath.mpf(y)) for x, y in zip(pa, pb)]
        keep = np.array([i for i, v in enumerate(values) if v is not None], dtype=int)
        assert_encloses(result[keep], [values[i] for i in keep], f"{name} {side}")


def test_python_scalars_work_on_either_side():
    x = Interval([1.0], [2.0])
    for result, exact in ((3 - x, (1, 2)), (x * 0.5, (0.5, 1)), (1 / x, (0.5, 1)), (2.0 + x, (3, 4))):
        assert result.lo[0] <= exact[0] and result.hi[0] >= exact[1]
        assert result.hi[0] - result.lo[0] < 1e-14 + (exact[1] - exact[0]) * (1 + 1e-14)


def test_even_power_is_tight_over_an_interval_containing_zero():
    r = Interval([-1.0], [2.0]) ** 2
    assert r.lo[0] == 0.0 and 4.0 <= r.hi[0] <= np.nextafter(4.0, 5.0)


def test_sin_over_zero_to_pi_reaches_one_and_cos_reaches_minus_one():
    s = iv.sin(Interval([0.0], [math.pi]))
    assert s.hi[0] == 1.0 and s.lo[0] <= 0.0 and s.lo[0] > -1e-15
    c = iv.cos(Interval([3.0], [3.3]))
    assert c.lo[0] == -1.0 and c.hi[0] < -0.98
    far = iv.sin(Interval([1.0e6 + 0.1], [1.0e6 + 0.2]))    # no extremum inside: stays tight
    exact = sorted(float(mpmath.sin(mpmath.mpf(v))) for v in (1.0e6 + 0.1, 1.0e6 + 0.2))
    assert far.width[0] < (exact[1] - exact[0]) + 1e-12


def test_division_by_an_interval_containing_zero_is_the_entire_line():
    r = Interval([1.0, 1.0], [2.0, 2.0]) / Interval([-1.0, 0.0], [1.0, 3.0])
    assert np.all(r.lo == -np.inf) and np.all(r.hi == np.inf)


def test_functions_outside_their_domain_raise_naming_the_function():
    for fn, name in ((iv.log, "log"), (iv.sqrt, "sqrt")):
        with pytest.raises(iv.IntervalDomainError, match=name):
            fn(Interval([-2.0], [-1.0]))
    assert iv.sqrt(Interval([-1.0], [4.0])).lo[0] == 0.0      # the part inside the domain


def test_matmul_with_point_matrix_encloses_exact_dot_products():
    rng = np.random.default_rng(3)
    x = random_intervals(rng, 40 * 17, scale=(-2, 2)).reshape(40, 17)
    w = rng.normal(size=(17, 5)) * 10.0 ** rng.uniform(-3, 3, (17, 5))
    r = iv.matmul(x, w)
    for p in points_in(rng, x):
        exact = [sum(mpmath.mpf(p[b, k]) * mpmath.mpf(w[k, j]) for k in range(17)) for b in range(40) for j in range(5)]
        assert_encloses(r, exact, "matmul")


def test_sum_encloses_exact_sum_of_points():
    rng = np.random.default_rng(4)
    x = random_intervals(rng, 30 * 50).reshape(30, 50)
    r = x.sum(axis=1)
    for p in points_in(rng, x):
        assert_encloses(r, [mpmath.fsum(mpmath.mpf(v) for v in row) for row in p], "sum")


def test_mid_and_rad_enclose_the_interval():
    rng = np.random.default_rng(5)
    x = random_intervals(rng, 500)
    m, r = x.mid, x.rad
    assert all(mpmath.mpf(m[i]) - mpmath.mpf(r[i]) <= mpmath.mpf(x.lo[i]) and
               mpmath.mpf(x.hi[i]) <= mpmath.mpf(m[i]) + mpmath.mpf(r[i]) for i in range(500))
    assert np.all(x.width >= x.hi - x.lo)


def test_set_operations_index_and_stack():
    a = Interval([[0.0, 1.0], [2.0, 3.0]], [[1.0, 2.0], [4.0, 5.0]])
    assert a[1].shape == (2,) and a[:, 0].lo.tolist() == [0.0, 2.0]
    s = Interval.stack([a[:, 0], 1.5, a[:, 1]], axis=1)
    assert s.shape == (2, 3) and s.lo[0, 1] == s.hi[0, 1] == 1.5
    assert np.all(a.hull(Interval(-1.0, -1.0)).lo == -1.0)
    assert np.all(a.intersect(Interval(0.5, 3.5)).hi <= 3.5)
    assert a.contains(np.array([[0.5, 1.5], [5.0, 3.0]])).tolist() == [[True, True], [False, True]]
    assert a.subset(Interval(0.0, 4.5)).tolist() == [[True, True], [True, False]]
    with pytest.raises(ValueError, match="lower bound exceeds"):
        Interval([1.0], [0.0])
    with pytest.raises(ValueError, match="empty intersection"):
        a.intersect(Interval(4.5, 9.0))


def test_namespace_turns_a_sympy_expression_into_a_sound_interval_evaluator():
    sympy = pytest.importorskip("sympy")
    a, b = sympy.symbols("a b")
    expr = sympy.sin(a) * b ** 2 + sympy.pi * sympy.Abs(a) / (1 + b ** 2) + sympy.sqrt(b ** 2 + 3) \
        - sympy.exp(-a) * sympy.cos(b) + sympy.atan(a) * sympy.tanh(b) + sympy.log(2 + b ** 2)
    fn = sympy.lambdify([a, b], expr, modules=[iv.NAMESPACE])
    rng = np.random.default_rng(6)
    A, B = random_intervals(rng, N, scale=(-2, 0.4)), random_intervals(rng, N, scale=(-2, 0.4))
    result = fn(A, B)
    exact_fn = sympy.lambdify([a, b], expr, modules="mpmath")
    for pa, pb in zip(points_in(rng, A), points_in(rng, B)):
        assert_encloses(result, [exact_fn(mpmath.mpf(x), mpmath.mpf(y)) for x, y in zip(pa, pb)], "sympy")
