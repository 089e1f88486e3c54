"""Filters on extreme Lie terms print no numpy RuntimeWarning (warnings are errors here), still
never return NaN, and the HOCBF row they build is the exact row wherever that is a float.

Reference: the row a = L_f^2 h + alpha1'(h) L_f h + alpha2(L_f h + alpha1(h)) for linear
gains in exact rational arithmetic (fractions.Fraction)."""
from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest

from cbfsim.barriers import LieTerms, LieTerms2
from cbfsim.classk import Cubic, Linear, Tanh
from cbfsim.filters import CBFQP, HOCBFQP, CBFProjection, hocbf_rows

BOUNDS = (np.array([-1.0, -2.0]), np.array([1.0, 0.5]))
SPECIAL = [np.inf, -np.inf, np.nan, 1.7e308, -1.7e308, 0.0, 5e-324]
F64_MAX = np.finfo(np.float64).max


def extreme(rng, size):
    values = rng.choice([-1, 1], size) * 10.0 ** rng.uniform(-300, 308, size)
    mask = rng.random(size) < 0.1
    values[mask] = rng.choice(SPECIAL, int(mask.sum()))
    return values


@pytest.fixture(autouse=True)
def warnings_are_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


@pytest.mark.parametrize("solver", ["osqp", "projection"])
@pytest.mark.parametrize("alphas", [(Linear(1.0), Linear(1.0)), (Tanh(1.0), Cubic(2.0)), (Cubic(1.0), Linear(50.0))],
                         ids=["linear", "tanh-cubic", "cubic-linear"])
def test_the_hocbf_filter_on_extreme_terms_warns_nothing_and_never_returns_nan(solver, alphas):
    rng = np.random.default_rng(22)
    f = HOCBFQP(BOUNDS, *alphas, solver=solver)
    for _ in range(150):
        B = 4
        terms = LieTerms2(h=extreme(rng, B), Lf=extreme(rng, B), Lg=np.zeros((B, 2)), Lf2=extreme(rng, B),
                          LgLf=extreme(rng, (B, 2)))
        result = f.filter(np.zeros((B, 2)), 3 * rng.normal(size=(B, 2)), terms)
        assert np.isfinite(result.u).all()
        assert np.all((BOUNDS[0] <= result.u) & (result.u <= BOUNDS[1]))


@pytest.mark.parametrize("make", [CBFQP, CBFProjection])
@pytest.mark.parametrize("alpha", [Linear(1.0), Cubic(3.0), Tanh(2.0)], ids=["linear", "cubic", "tanh"])
def test_the_cbf_filter_on_extreme_terms_warns_nothing_and_never_returns_nan(make, alpha):
    rng = np.random.default_rng(23)
    f = make((BOUNDS[0][:1], BOUNDS[1][:1]), alpha)
    for _ in range(150):
        terms = LieTerms(h=extreme(rng, 4), Lf=extreme(rng, 4), Lg=extreme(rng, (4, 1)))
        assert np.isfinite(f.filter(np.zeros((4, 2)), rng.normal(size=(4, 1)), terms).u).all()


def test_the_hocbf_row_is_exact_where_it_is_a_float_and_infinite_or_nan_only_beyond():
    rng = np.random.default_rng(24)
    g1, g2 = 3.0, 0.5
    for _ in range(3000):
        h, lf, lf2 = (float(v) for v in rng.choice([-1, 1], 3) * 10.0 ** rng.uniform(-300, 308, 3))
        a, _ = hocbf_rows(LieTerms2(h=np.array([h]), Lf=np.array([lf]), Lg=np.zeros((1, 1)), Lf2=np.array([lf2]),
                                    LgLf=np.zeros((1, 1))), Linear(g1), Linear(g2))
        H, LF, LF2, G1, G2 = (Fraction(v) for v in (h, lf, lf2, g1, g2))
        exact = LF2 + G1 * LF + G2 * (LF + G1 * H)
        # the float evaluation: four roundings, each within eps of the magnitudes it combines
        scale = abs(LF2) + G1 * abs(LF) + G2 * abs(LF) + G2 * G1 * abs(H)
        if scale <= Fraction(F64_MAX) / 8:
            assert np.isfinite(a[0])
            assert abs(Fraction(float(a[0])) - exact) <= 8 * Fraction(np.finfo(float).eps) * scale
        else:                                     # some product or sum overflowed: no warning, inf or NaN
            assert not np.isfinite(a[0]) or abs(Fraction(float(a[0])) - exact) <= 8 * Fraction(
                np.finfo(float).eps) * scale
