"""systems/enclosure.py: interval enclosures printed from each plant's sympy definition contain
the simulator's float64 values and the exact real values (mpmath, 40 digits) at sampled
points, under mpmath.iv (scalar, sound) and compiler.interval (batched)."""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable

import mpmath
import numpy as np
import pytest
import sympy as sp
from mpmath import iv

from compiler.errors import CbfsimError
from compiler.interval import NAMESPACE, Interval
from systems import SYSTEM_NAMES, ControlAffineSystem, get_system
from systems.base import Definition
from systems.enclosure import PlantEnclosure, UnsupportedExpressionError

IV_NAMESPACE = {"sin": iv.sin, "cos": iv.cos, "tan": iv.tan, "exp": iv.exp, "log": iv.log,
                "sqrt": iv.sqrt, "Abs": abs}
BACKENDS = ("mpmath", "interval")
HP_DPS = 40
WIDTHS = (1e-3, 0.05, 0.5, 1.0)     # box edge as a share of the domain's edge


# ----------------------------------------------------------------------------- boxes and points

def random_boxes(system: ControlAffineSystem, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two boxes per width share, inside the domain: lo, hi of shape (B, n)."""
    rng = np.random.default_rng(seed)
    d_lo, d_hi = system.domain
    los, his = [], []
    for share in WIDTHS:
        for _ in range(2):
            edge = share * (d_hi - d_lo)
            lo = rng.uniform(d_lo, d_hi - edge)
            los.append(lo)
            his.append(np.minimum(lo + edge, d_hi))
    return np.array(los), np.array(his)


def box_points(lo: np.ndarray, hi: np.ndarray, seed: int, random_count: int = 8) -> np.ndarray:
    """Every vertex, the centre and random points of each box: (B, P, n)."""
    rng = np.random.default_rng(seed)
    n = lo.shape[1]
    corners = np.array(list(itertools.product((0.0, 1.0), repeat=n)))
    share = np.concatenate([corners, np.full((1, n), 0.5), rng.uniform(size=(random_count, n))])
    return np.clip(lo[:, None, :] + share[None] * (hi - lo)[:, None, :], lo[:, None, :], hi[:, None, :])


# ----------------------------------------------------------------------------- evaluating enclosures

def _flatten(nested: Any) -> list[Any]:
    if isinstance(nested, list):
        return [leaf for item in nested for leaf in _flatten(item)]
    return [nested]


def _bounds_of(entry: Any, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) float arrays (batch,) of one returned entry: an Interval, an mpmath
    interval (batch 1) or a plain Python float (an exact constant)."""
    if isinstance(entry, Interval):
        return np.broadcast_to(entry.lo, (batch,)), np.broadcast_to(entry.hi, (batch,))
    if isinstance(entry, iv.mpf):
        lo, hi = float(entry.a), float(entry.b)
        assert mpmath.mpf(lo) == entry.a.a and mpmath.mpf(hi) == entry.b.b, "endpoints are float64 values"
        return np.full(batch, lo), np.full(batch, hi)
    assert type(entry) is float, f"constant entries are Python floats, got {type(entry)}"
    return np.full(batch, entry), np.full(batch, entry)


def enclose(fn: Callable[[list[Any]], Any], backend: str, lo: np.ndarray, hi: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """Bounds (B, k) of the k flattened entries fn returns, box by box (mpmath) or batched."""
    if backend == "interval":
        out = _flatten(fn([Interval(lo[:, i], hi[:, i]) for i in range(lo.shape[1])]))
        pairs = [_bounds_of(e, lo.shape[0]) for e in out]
        if not pairs:                   # an empty field (G of an autonomous plant, m = 0)
            return np.zeros((lo.shape[0], 0)), np.zeros((lo.shape[0], 0))
        return np.stack([p[0] for p in pairs], 1), np.stack([p[1] for p in pairs], 1)
    rows_lo, rows_hi = [], []
    for b in range(lo.shape[0]):
        out = _flatten(fn([iv.mpf([lo[b, i], hi[b, i]]) for i in range(lo.shape[1])]))
        pairs = [_bounds_of(e, 1) for e in out]
        rows_lo.append([p[0][0] for p in pairs])
        rows_hi.append([p[1][0] for p in pairs])
    return np.array(rows_lo).reshape(lo.shape[0], -1), np.array(rows_hi).reshape(lo.shape[0], -1)


# ----------------------------------------------------------------------------- references

def float_constants(expr: sp.Expr) -> sp.Expr:
    """expr with its non-integer rationals and symbolic constants replaced by the float64
    values the simulator uses (the model the enclosure encloses)."""
    repl = {a: sp.Float(float(a), 60) for a in expr.atoms(sp.Rational, sp.NumberSymbol)
            if not a.is_Integer}
    return expr.xreplace(repl)


def high_precision(system: ControlAffineSystem, exprs: list[sp.Expr]) -> Callable[..., list[Any]]:
    """The entries as mpmath functions of the state (evaluated at HP_DPS digits)."""
    return sp.lambdify(system.x_sym, [float_constants(sp.sympify(e)) for e in exprs], modules="mpmath")


def exact_values(fn: Callable[..., list[Any]], points: np.ndarray) -> list[list[Any]]:
    """fn at every point of (B, P, n), flattened to B*P rows of mpf."""
    with mpmath.workdps(HP_DPS):
        return [fn(*[mpmath.mpf(float(v)) for v in p]) for p in points.reshape(-1, points.shape[-1])]


def numeric_jacobian(fn: Callable[..., list[Any]], point: np.ndarray, k: int) -> list[Any]:
    """d/dx_j of the k entries of fn at one point by mpmath's numerical differentiation."""
    with mpmath.workdps(HP_DPS):
        x = [mpmath.mpf(float(v)) for v in point]

        def partial(i: int, j: int) -> Any:
            def along(t: Any) -> Any:
                return fn(*(x[:j] + [t] + x[j + 1:]))[i]
            return mpmath.diff(along, x[j])
        return [partial(i, j) for i in range(k) for j in range(len(x))]


def assert_inside_float(lo: np.ndarray, hi: np.ndarray, values: np.ndarray, what: str) -> None:
    """values (B, P, k) inside the bounds (B, k) of their box."""
    inside = (lo[:, None, :] <= values) & (values <= hi[:, None, :])
    if not inside.all():
        b, p, k = np.argwhere(~inside)[0]
        raise AssertionError(f"{what}[{k}] = {values[b, p, k]!r} at box {b} point {p} is outside "
                             f"[{lo[b, k]!r}, {hi[b, k]!r}]")


def assert_inside_exact(lo: np.ndarray, hi: np.ndarray, values: list[list[Any]], per_box: int, what: str
                        ) -> None:
    for row, vals in enumerate(values):
        b = row // per_box
        for k, v in enumerate(vals):
            assert lo[b, k] <= v <= hi[b, k], f"{what}[{k}] = {v} (exact) at box {b} outside [{lo[b, k]}, {hi[b, k]}]"


# ----------------------------------------------------------------------------- containment tests

@pytest.fixture(params=SYSTEM_NAMES)
def system(request: pytest.FixtureRequest) -> ControlAffineSystem:
    return get_system(request.param)


def _enclosure(system: ControlAffineSystem, backend: str) -> PlantEnclosure:
    return system.enclosure(NAMESPACE if backend == "interval" else IV_NAMESPACE)


def _boxes_and_points(system: ControlAffineSystem, seed: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """lo, hi (B, n) of random boxes, points (B, P, n) in them and the points flat (B*P, n)."""
    lo, hi = random_boxes(system, seed=seed)
    pts = box_points(lo, hi, seed=seed + 1)
    return lo, hi, pts, pts.reshape(-1, system.n)


@pytest.mark.parametrize("backend", BACKENDS)
def test_f_G_and_constraint_enclosures_contain_simulator_and_exact_values(system: ControlAffineSystem,
                                                                          backend: str) -> None:
    lo, hi, pts, flat = _boxes_and_points(system, seed=1)
    enc, (B, P, n), m = _enclosure(system, backend), pts.shape, system.m
    cases = [
        ("f", enc.f, system.f(flat).reshape(B, P, n), list(system.f_expr)),
        ("G", enc.G, system.G(flat).reshape(B, P, n * m), list(system.G_expr)),
        ("constraint", enc.constraint, np.asarray(system.constraint(flat)).reshape(B, P, 1),
         [system.constraint_expr]),
    ]
    for what, fn, simulated, exprs in cases:
        e_lo, e_hi = enclose(fn, backend, lo, hi)
        assert e_lo.shape == (B, simulated.shape[-1])
        assert_inside_float(e_lo, e_hi, simulated, what)
        assert_inside_exact(e_lo, e_hi, exact_values(high_precision(system, exprs), pts), P, what)


@pytest.mark.parametrize("backend", BACKENDS)
def test_jacobian_enclosures_contain_df_sympy_and_numerical_derivatives(system: ControlAffineSystem,
                                                                         backend: str) -> None:
    lo, hi, pts, flat = _boxes_and_points(system, seed=3)
    enc, (B, P, n), m = _enclosure(system, backend), pts.shape, system.m

    J_lo, J_hi = enclose(enc.jac_f, backend, lo, hi)                    # (B, n*n), row i col k
    columns = [system.df(flat, np.broadcast_to(np.eye(n)[k], flat.shape)) for k in range(n)]
    J_df = np.stack(columns, axis=-1).reshape(B, P, n * n)                # f'(x) e_k = column k
    assert_inside_float(J_lo, J_hi, J_df, "jac_f (df)")
    x = sp.Matrix(system.x_sym)
    f_hp = sp.Matrix([float_constants(e) for e in system.f_expr])
    sympy_J = list(f_hp.jacobian(x))
    assert_inside_exact(J_lo, J_hi, exact_values(high_precision(system, sympy_J), pts), P, "jac_f (sympy)")

    JG_lo, JG_hi = enclose(enc.jac_G, backend, lo, hi)                  # (B, m*n*n), input j, row i, col k
    G_hp = [list(float_constants(e) for e in system.G_expr[:, j]) for j in range(m)]
    sympy_JG = [e for j in range(m) for e in sp.Matrix(G_hp[j]).jacobian(x)]
    assert_inside_exact(JG_lo, JG_hi, exact_values(high_precision(system, sympy_JG), pts), P, "jac_G (sympy)")

    # mpmath's numerical differentiation of f and of each column of G, independent of sympy.diff
    f_fn = high_precision(system, list(system.f_expr))
    G_fns = [high_precision(system, list(system.G_expr[:, j])) for j in range(m)]
    for b in range(B):
        for p in (P - 1, P - 2):                                          # two random points per box
            numeric = numeric_jacobian(f_fn, pts[b, p], n)
            assert_inside_exact(J_lo[b:b + 1], J_hi[b:b + 1], [numeric], 1, "jac_f (numerical)")
            numeric_G = [v for g in G_fns for v in numeric_jacobian(g, pts[b, p], n)]
            assert_inside_exact(JG_lo[b:b + 1], JG_hi[b:b + 1], [numeric_G], 1, "jac_G (numerical)")


def test_batched_and_mpmath_enclosures_agree_to_rounding(system: ControlAffineSystem) -> None:
    """The same printed code under two interval types: bounds agree up to their different
    widening of transcendental functions (a gross printing error would show here)."""
    lo, hi = random_boxes(system, seed=5)
    for what in ("f", "G", "jac_f", "jac_G", "constraint"):
        a_lo, a_hi = enclose(getattr(system.enclosure(NAMESPACE), what), "interval", lo, hi)
        b_lo, b_hi = enclose(getattr(system.enclosure(IV_NAMESPACE), what), "mpmath", lo, hi)
        scale = 1.0 + np.maximum(np.abs(b_lo), np.abs(b_hi))
        assert np.all(np.abs(a_lo - b_lo) <= 1e-12 * scale), what
        assert np.all(np.abs(a_hi - b_hi) <= 1e-12 * scale), what


@pytest.mark.parametrize("backend", BACKENDS)
def test_enclosures_of_a_single_state_are_tight_to_rounding(system: ControlAffineSystem, backend: str) -> None:
    """Not merely sound: over a degenerate box every entry is a few ulps wide."""
    x = np.random.default_rng(7).uniform(*system.domain, size=(3, system.n))
    for what in ("f", "G", "jac_f", "jac_G", "constraint"):
        lo, hi = enclose(getattr(_enclosure(system, backend), what), backend, x, x)
        assert np.all(hi - lo <= 1e-13 * (1.0 + np.abs(lo))), what


# ----------------------------------------------------------------------------- printing

def test_even_powers_are_enclosed_tightly_not_as_products() -> None:
    """The Van der Pol disk r^2 - x1^2 - x2^2 over [-1, 1]^2 is [r^2 - 2, r^2]: x*x would
    give r^2 + 2 as the upper bound."""
    vdp = get_system("van_der_pol")
    r2 = vdp.params.r ** 2
    enc = vdp.enclosure(NAMESPACE)
    h = enc.constraint([Interval(-1.0, 1.0), Interval(-1.0, 1.0)])
    assert r2 <= float(h.hi) <= r2 + 1e-12                 # outward rounding: a few ulps
    assert r2 - 2.0 - 1e-12 <= float(h.lo) <= r2 - 2.0


def test_constant_entries_are_the_simulators_float64_values(system: ControlAffineSystem) -> None:
    enc = system.enclosure(NAMESPACE)
    x = np.mean(system.domain, axis=0)
    G = enc.G([Interval.point(v) for v in x])
    for i in range(system.n):
        for j in range(system.m):
            if type(G[i][j]) is float:
                assert G[i][j] == system.G(x)[i, j]
    assert np.array_equal(enc.u_min, system.u_min) and np.array_equal(enc.u_max, system.u_max)
    assert all(np.array_equal(a, b) for a, b in zip(enc.domain, system.domain))


# ----------------------------------------------------------------------------- refusals

@dataclasses.dataclass(frozen=True)
class _NoParams:
    pass


def toy_system(drift: Callable[[sp.Symbol], Any]) -> ControlAffineSystem:
    """A one-state plant named 'toy' with xdot = drift(x) + u."""

    class Toy(ControlAffineSystem):
        name = "toy"
        state_names = ("x",)
        input_names = ("u",)
        Params = _NoParams

        @staticmethod
        def define(x: tuple[sp.Symbol, ...], p: Any) -> Definition:
            return Definition(f=[drift(x[0])], G=[[1]], constraint=1 - x[0] ** 2, u_min=[-1], u_max=[1],
                              domain=([-2], [2]), nominal={})
    return Toy()


@pytest.mark.parametrize("drift, named", [
    (lambda x: sp.sinh(x), "sinh"),
    (lambda x: sp.sign(x) * x, "sign"),
    (lambda x: sp.Piecewise((x, x > 0), (-x, True)), "Piecewise"),
    (lambda x: x ** x, "non-constant exponent"),
    (lambda x: sp.Abs(x), "jac_f[0][0] = sign(x)"),          # |x| itself is fine; its derivative is not
])
def test_a_function_the_namespace_lacks_is_refused_with_one_line_naming_it(drift: Callable, named: str) -> None:
    toy = toy_system(drift)
    with pytest.raises(UnsupportedExpressionError, match="toy: ") as info:
        toy.enclosure(NAMESPACE)
    message = str(info.value)
    assert named in message and "\n" not in message
    assert isinstance(info.value, CbfsimError) and isinstance(info.value, ValueError)


def test_a_namespace_without_cos_refuses_the_pendulum_jacobian_never_falls_back_to_math() -> None:
    no_cos = {k: v for k, v in NAMESPACE.items() if k != "cos"}
    with pytest.raises(UnsupportedExpressionError, match=r"jac_f\[1\]\[0\] = 9.81\*cos\(theta\) uses cos"):
        get_system("inverted_pendulum").enclosure(no_cos)
