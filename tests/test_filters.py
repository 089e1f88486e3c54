"""Class-K functions, barrier implementations and the safety filters.

The central claim: the OSQP filter (QPRowSolver) and the closed-form projection solve the
same problem P_rho on normalised rows (see cbfsim/filters/cbf_qp.py), so they agree to 1e-6
on random problems, including infeasible rows and gains with zero entries; the projection
is optimal (KKT and an independent SLSQP solve); multi-row OSQP matches SLSQP too.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from cbfsim.barriers import AnalyticBarrier, LieTerms, LieTerms2, ShapeError, TorchBarrier, barrier_terms
from cbfsim.classk import Cubic, Linear, Power, Tanh
from cbfsim.filters import (CBFQP, HOCBFQP, CBFProjection, FilterStatus, ProjectionRowSolver, QPRowSolver,
                            SafetyFilter, hocbf_rows, project_halfspace_box, psi1)
from cbfsim.filters.base import normalise_rows
from systems import get_system

# ----------------------------------------------------------------------------- class-K

CLASS_K = [Linear(2.0), Cubic(0.7), Power(1.5, 0.5), Power(2.0, 1.0), Power(0.8, 1.7), Power(1.0, 3.0),
           Tanh(3.0, 0.4)]


@pytest.mark.parametrize("alpha", CLASS_K, ids=repr)
def test_classk_derivative_matches_finite_differences(alpha):
    rng = np.random.default_rng(0)
    s = rng.uniform(-3, 3, 200)
    s = s[np.abs(s) > 1e-2]                      # Power(p < 1) has a cusp at 0
    eps = 1e-6
    fd = (alpha(s + eps) - alpha(s - eps)) / (2 * eps)
    np.testing.assert_allclose(alpha.derivative(s), fd, rtol=1e-6, atol=1e-8)
    assert alpha(0.0) == 0.0
    assert np.all(np.diff(alpha(np.sort(s))) > 0)           # strictly increasing, also for s < 0
    torch_s = torch.tensor(s, dtype=torch.float64)
    np.testing.assert_allclose(alpha(torch_s).numpy(), alpha(s), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(alpha.derivative(torch_s).numpy(), alpha.derivative(s), rtol=1e-12, atol=1e-15)


def test_power_derivative_at_zero_and_validation():
    with np.errstate(all="raise"):               # no divide-by-zero warnings at s = 0
        assert Power(2.0, 1.5).derivative(np.array([0.0]))[0] == 0.0
        assert Power(2.0, 1.0).derivative(np.array([0.0]))[0] == 2.0
        assert Power(2.0, 0.5).derivative(np.array([0.0]))[0] == np.inf
    assert Power(2.0, 0.5).derivative(torch.zeros(1)).item() == float("inf")
    for bad in (lambda: Linear(0.0), lambda: Power(1.0, -1.0), lambda: Tanh(1.0, float("nan")), lambda: Cubic(-2)):
        with pytest.raises(ValueError, match="must be a finite number > 0"):
            bad()


# ----------------------------------------------------------------------------- barriers

class Quadratic(torch.nn.Module):
    """h(x) = c - x^T Q x + w.x, written in torch (no nn.Linear, so n is passed)."""

    def __init__(self, Q, w, c):
        super().__init__()
        self.Q, self.w, self.c = (torch.as_tensor(v, dtype=torch.float64) for v in (Q, w, c))

    def forward(self, x):
        return self.c - torch.einsum("bi,ij,bj->b", x, self.Q.to(x.dtype), x) + x @ self.w.to(x.dtype)


def test_torch_and_analytic_barriers_agree_to_second_order():
    rng = np.random.default_rng(1)
    n, m, B = 3, 2, 64
    A = rng.normal(size=(n, n))
    Q, w, c = A @ A.T, rng.normal(size=n), 2.0
    analytic = AnalyticBarrier(lambda X: c - np.einsum("bi,ij,bj->b", X, Q, X) + X @ w,
                               lambda X: -2 * X @ Q + w,
                               lambda X: np.broadcast_to(-2 * Q, (X.shape[0], n, n)), n=n, m=m)
    reference = TorchBarrier(Quadratic(Q, w, c), m=m, n=n)
    X, F, G = rng.normal(size=(B, n)), rng.normal(size=(B, n)), rng.normal(size=(B, n, m))
    Dff, DfG = rng.normal(size=(B, n)), rng.normal(size=(B, n, m))
    t1, t2 = analytic.lie2(X, F, G, Dff, DfG), reference.lie2(X, F, G, Dff, DfG)
    for name in ("h", "Lf", "Lg", "Lf2", "LgLf"):
        np.testing.assert_allclose(getattr(t1, name), getattr(t2, name), rtol=1e-12, atol=1e-12)
    first = reference.lie(X, F, G)
    np.testing.assert_allclose(first.Lg, t2.Lg, rtol=1e-14)
    # L_G L_f h by hand: grad(grad h . f) . G_j = (H f + f'(x)^T grad h) . G_j with f'(x) f, f'(x) G given
    Hf = np.einsum("ij,bj->bi", -2 * Q, F)
    np.testing.assert_allclose(t1.LgLf, np.einsum("bi,bij->bj", Hf, G)
                               + np.einsum("bi,bij->bj", -2 * X @ Q + w, DfG), rtol=1e-12)


def test_torch_barrier_on_mlp_matches_finite_differences_and_leaves_module_alone():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    bar = TorchBarrier(net, m=1)
    assert next(net.parameters()).dtype == torch.float32 and bar.n == 2
    system = get_system("van_der_pol")
    X = np.random.default_rng(2).uniform(-1, 1, (16, 2))
    terms = barrier_terms(bar, system, X, order=2)
    assert isinstance(terms, LieTerms2)
    # L_f^2 h = d/dt (L_f h) along the drift: central difference along x' = f(x)
    dt = 1e-5
    lf = lambda Y: barrier_terms(bar, system, Y, order=1).Lf  # noqa: E731
    fd = (lf(X + dt * system.f(X)) - lf(X - dt * system.f(X))) / (2 * dt)
    np.testing.assert_allclose(terms.Lf2, fd, rtol=1e-5, atol=1e-8)


def test_barrier_shape_errors_name_expected_and_actual():
    bar = AnalyticBarrier(lambda X: 1 - (X**2).sum(1), lambda X: -2 * X, n=2, m=1)
    with pytest.raises(ShapeError, match=r"G\(x\): expected shape \(3, 2, 1\), got \(3, 2, 2\)"):
        bar.lie(np.zeros((3, 2)), np.zeros((3, 2)), np.zeros((3, 2, 2)))
    with pytest.raises(ShapeError, match=r"expected shape \(B, 2\) or \(2,\), got \(3, 3\)"):
        bar.value(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="lie2 needs order 2"):
        bar.lie2(np.zeros(2), np.zeros(2), np.zeros((2, 1)), np.zeros(2), np.zeros((2, 1)))
    with pytest.raises(ShapeError, match="barrier has"):
        barrier_terms(AnalyticBarrier(bar.value, lambda X: -2 * X, n=2, m=3), get_system("van_der_pol"), np.zeros(2))


# ----------------------------------------------------------------------------- random problems

def random_problem(rng, m=None, infeasible_bias=0.0):
    """One row a + b.u >= 0 with a random box; b spans 4 decades and has exact zeros."""
    m = int(rng.integers(1, 5)) if m is None else m
    lo, hi = -rng.uniform(0.1, 3, m), rng.uniform(0.1, 3, m)
    b = rng.normal(size=m) * 10 ** rng.uniform(-3, 1)
    b[rng.random(m) < 0.25] = 0.0
    u_nom = rng.normal(size=m) * 3
    a = rng.normal() * 4 - infeasible_bias
    return a, b, u_nom, lo, hi


def test_osqp_equals_projection_on_1000_random_problems():
    rng = np.random.default_rng(42)
    solvers: dict[tuple, tuple] = {}
    worst, infeasible, relaxed, zeros = 0.0, 0, 0, 0
    for _ in range(1000):
        a, b, u_nom, lo, hi = random_problem(rng)
        key = (lo.tobytes(), hi.tobytes())
        qp, proj = solvers.setdefault(key, (QPRowSolver(lo, hi), ProjectionRowSolver(lo, hi)))
        r_qp = qp.solve(np.array([[a]]), b[None, None], u_nom[None])
        r_pr = proj.solve(np.array([[a]]), b[None, None], u_nom[None])
        worst = max(worst, np.abs(r_qp.u - r_pr.u).max(), abs(r_qp.slack - r_pr.slack).max())
        assert r_qp.status[0] == r_pr.status[0] != FilterStatus.SOLVER_ERROR
        infeasible += not project_halfspace_box([a], b[None], u_nom[None], lo, hi).feasible[0]
        relaxed += r_pr.status[0] == FilterStatus.SLACK_ACTIVE
        zeros += (b == 0).any()
    assert worst < 1e-6, worst
    assert infeasible > 150 and relaxed >= infeasible and zeros > 200, (infeasible, relaxed, zeros)


def test_osqp_solver_reused_across_unrelated_problems():
    """Warm starts from an unrelated previous problem must not bias the answer."""
    rng = np.random.default_rng(7)
    lo, hi = -np.ones(3), np.ones(3)
    qp, proj = QPRowSolver(lo, hi), ProjectionRowSolver(lo, hi)
    for _ in range(200):
        a, b, u_nom, _, _ = random_problem(rng, m=3)
        r1 = qp.solve(np.array([[a]]), b[None, None], u_nom[None])
        r2 = proj.solve(np.array([[a]]), b[None, None], u_nom[None])
        np.testing.assert_allclose(r1.u, r2.u, atol=1e-6)
    assert qp.stats["failed"] == 0 and qp.stats["relaxed"] > 0


def slsqp(a, B, u_nom, lo, hi, rho=None):
    """Independent reference: SLSQP on the hard QP (rho None) or on P_rho with slacks."""
    k, m = B.shape
    if rho is None:
        cons = [{"type": "ineq", "fun": lambda u: a + B @ u, "jac": lambda u: B}]
        res = minimize(lambda u: 0.5 * np.sum((u - u_nom) ** 2), np.clip(u_nom, lo, hi), jac=lambda u: u - u_nom,
                       bounds=list(zip(lo, hi)), constraints=cons, method="SLSQP",
                       options={"ftol": 1e-15, "maxiter": 500})
        return res.x
    obj = lambda z: 0.5 * np.sum((z[:m] - u_nom) ** 2) + rho * z[m:].sum()  # noqa: E731
    jac = lambda z: np.r_[z[:m] - u_nom, np.full(k, rho)]  # noqa: E731
    cons = [{"type": "ineq", "fun": lambda z: a + B @ z[:m] + z[m:], "jac": lambda z: np.c_[B, np.eye(k)]}]
    z0 = np.r_[np.clip(u_nom, lo, hi), np.maximum(0, -(a + B @ np.clip(u_nom, lo, hi)))]
    res = minimize(obj, z0, jac=jac, bounds=list(zip(lo, hi)) + [(0, None)] * k, constraints=cons,
                   method="SLSQP", options={"ftol": 1e-15, "maxiter": 1000})
    return res.x[:m]


def test_projection_is_optimal_kkt_and_slsqp():
    rng = np.random.default_rng(3)
    checked_feasible = checked_infeasible = 0
    for _ in range(150):
        a, b, u_nom, lo, hi = random_problem(rng, m=int(rng.integers(1, 4)))
        p = project_halfspace_box([a], b[None], u_nom[None], lo, hi)          # rho = inf
        u, lam = p.u[0], p.lam[0]
        g = a + b @ u
        if p.feasible[0]:
            # KKT: u = clip(u_nom + lam b), lam >= 0, g >= 0, lam * g = 0
            np.testing.assert_allclose(u, np.clip(u_nom + lam * b, lo, hi), atol=1e-12)
            assert lam >= 0 and g >= -1e-12 and abs(lam * g) <= 1e-9 * (1 + lam)
            np.testing.assert_allclose(u, slsqp(np.array([a]), b[None], u_nom, lo, hi), atol=1e-6)
            checked_feasible += 1
        else:
            # least violation: maximise a + b.u over the box, then closest to u_nom
            best = np.where(b > 0, hi, np.where(b < 0, lo, np.clip(u_nom, lo, hi)))
            np.testing.assert_allclose(u, best, atol=0)
            assert p.slack[0] == pytest.approx(-(a + b @ best), abs=1e-12) and p.slack[0] > 0
            # and it is the rho -> inf limit of P_rho
            big = project_halfspace_box([a], b[None], u_nom[None], lo, hi, slack_penalty=1e12)
            np.testing.assert_allclose(big.u[0], best, atol=1e-6)
            checked_infeasible += 1
    assert checked_feasible > 50 and checked_infeasible > 20


def test_projection_with_finite_penalty_matches_slsqp():
    rng = np.random.default_rng(4)
    for _ in range(60):
        a, b, u_nom, lo, hi = random_problem(rng, m=2, infeasible_bias=3.0)
        b = np.where(b == 0, 0.0, np.sign(b) * np.maximum(np.abs(b), 0.3))
        rho = 2.0                                   # small: the relaxed branch is common
        p = project_halfspace_box([a], b[None], u_nom[None], lo, hi, slack_penalty=rho)
        np.testing.assert_allclose(p.u[0], slsqp(np.array([a]), b[None], u_nom, lo, hi, rho=rho), atol=1e-6)


def test_multi_row_osqp_matches_slsqp():
    rng = np.random.default_rng(5)
    for k in (2, 3):
        for _ in range(25):
            m = int(rng.integers(2, 4))
            lo, hi = -rng.uniform(0.5, 2, m), rng.uniform(0.5, 2, m)
            a, B, u_nom = rng.normal(size=k), rng.normal(size=(k, m)), 2 * rng.normal(size=m)
            rho = 3.0
            qp = QPRowSolver(lo, hi, n_rows=k, slack_penalty=rho)
            res = qp.solve(a[None], B[None], u_nom[None])
            an, Bn = normalise_rows(a[None], B[None])
            np.testing.assert_allclose(res.u[0], slsqp(an[0], Bn[0], u_nom, lo, hi, rho=rho), atol=2e-6)
            assert res.status[0] != FilterStatus.SOLVER_ERROR


def test_projection_is_vectorised_and_batch_independent():
    rng = np.random.default_rng(6)
    m, B = 3, 500
    lo, hi = -np.ones(m), 2 * np.ones(m)
    a, b, u_nom = 3 * rng.normal(size=B), rng.normal(size=(B, m)), 3 * rng.normal(size=(B, m))
    b[rng.random((B, m)) < 0.2] = 0
    batch = project_halfspace_box(a, b, u_nom, lo, hi, slack_penalty=1e6)
    for i in range(0, B, 50):
        one = project_halfspace_box(a[i:i + 1], b[i:i + 1], u_nom[i:i + 1], lo, hi, slack_penalty=1e6)
        np.testing.assert_array_equal(one.u[0], batch.u[i])


# ----------------------------------------------------------------------------- filters

def test_cbf_filters_agree_flag_slack_and_errors():
    system = get_system("van_der_pol")
    rng = np.random.default_rng(8)
    B = 40
    terms = LieTerms(h=rng.uniform(-0.5, 1, B), Lf=rng.normal(size=B) * 3, Lg=rng.normal(size=(B, 1)))
    u_nom = rng.normal(size=(B, 1)) * 3
    qp, proj = CBFQP(system, Linear(2.0)), CBFProjection(system, Linear(2.0))
    assert isinstance(qp, SafetyFilter) and isinstance(proj, SafetyFilter)
    r1, r2 = qp.filter(None, u_nom, terms), proj.filter(None, u_nom, terms)
    np.testing.assert_allclose(r1.u, r2.u, atol=1e-9)
    np.testing.assert_array_equal(r1.status, r2.status)
    assert (r1.status == FilterStatus.SLACK_ACTIVE).any() and (r1.status == FilterStatus.OK).any()
    cbf = terms.Lf + terms.Lg[:, 0] * r2.u[:, 0] + 2.0 * terms.h
    ok = r2.status == FilterStatus.OK
    assert (cbf[ok] >= -1e-9).all() and np.allclose(-cbf[~ok], r2.slack[~ok])
    assert (np.abs(r2.u) <= system.u_max + 1e-12).all() and (r1.solve_time > 0).all()
    bad = LieTerms(h=np.array([np.nan]), Lf=np.zeros(1), Lg=np.zeros((1, 1)))
    for filt in (qp, proj):
        res = filt.filter(None, np.array([[5.0]]), bad)
        # fail-safe: the default fallback (hold; nothing held yet -> the box point nearest 0),
        # not the clipped nominal u_max
        assert res.status[0] == FilterStatus.FALLBACK and res.u[0, 0] == 0.0
    with pytest.raises(ShapeError, match=r"u_nom: expected shape \(B, 1\) or \(1,\), got \(3, 2\)"):
        qp.filter(None, np.zeros((3, 2)), terms)
    with pytest.raises(ShapeError, match=r"row 0 offset a: expected shape \(3,\), got \(40,\)"):
        proj.filter(None, np.zeros((3, 1)), terms)


def test_two_barrier_qp_enforces_both_rows():
    rng = np.random.default_rng(9)
    B = 30
    t1 = LieTerms(h=rng.uniform(0, 1, B), Lf=rng.normal(size=B), Lg=rng.normal(size=(B, 2)))
    t2 = LieTerms(h=rng.uniform(0, 1, B), Lf=rng.normal(size=B), Lg=rng.normal(size=(B, 2)))
    qp = CBFQP((-5 * np.ones(2), 5 * np.ones(2)), [Linear(1.0), Cubic(2.0)], n_barriers=2)
    res = qp.filter(None, 3 * rng.normal(size=(B, 2)), [t1, t2])
    g1 = t1.Lf + np.einsum("bm,bm->b", t1.Lg, res.u) + t1.h
    g2 = t2.Lf + np.einsum("bm,bm->b", t2.Lg, res.u) + 2 * t2.h**3
    ok = res.status == FilterStatus.OK
    assert ok.sum() > 20 and (g1[ok] >= -1e-9).all() and (g2[ok] >= -1e-9).all()


def test_hocbf_row_is_the_corrected_condition():
    rng = np.random.default_rng(10)
    B = 20
    t = LieTerms2(h=rng.uniform(0, 2, B), Lf=rng.normal(size=B), Lg=np.zeros((B, 1)), Lf2=rng.normal(size=B),
                  LgLf=rng.normal(size=(B, 1)))
    a1, a2 = Tanh(3.0, 0.5), Cubic(1.5)
    a, b = hocbf_rows(t, a1, a2)
    p1 = t.Lf + 1.5 * np.tanh(t.h / 0.5)
    np.testing.assert_allclose(psi1(t, a1), p1)
    np.testing.assert_allclose(a, t.Lf2 + 3.0 * (1 - np.tanh(t.h / 0.5) ** 2) * t.Lf + 1.5 * p1**3, rtol=1e-13)
    np.testing.assert_array_equal(b, t.LgLf)
    bounds = (-np.ones(1), np.ones(1))
    u_nom = rng.normal(size=(B, 1))
    r1 = HOCBFQP(bounds, a1, a2).filter(None, u_nom, t)
    r2 = HOCBFQP(bounds, a1, a2, solver="projection").filter(None, u_nom, t)
    np.testing.assert_allclose(r1.u, r2.u, atol=1e-9)
    with pytest.raises(TypeError, match="expected LieTerms2"):
        HOCBFQP(bounds, a1, a2).filter(None, u_nom, LieTerms(t.h, t.Lf, t.Lg))
