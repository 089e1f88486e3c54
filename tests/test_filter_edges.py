"""Filters at the edges of their solvers' range, the fault policy and the row margin
(issue 11 items 9 and 10; the certifier's margin eps).

References: the closed-form projection (an independent solver of the same problem P_rho)
and, for one input, an exact rational solution of P_rho (fractions.Fraction).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from cbfsim.barriers import AnalyticBarrier, LieTerms, LieTerms2
from cbfsim.classk import Linear, Tanh
from cbfsim.filters import (CBFQP, HOCBFQP, CBFProjection, Fallback, FilterStatus, ProjectionRowSolver,
                            QPRowSolver, hocbf_rows)
from cbfsim.filters.base import normalise_rows
from cbfsim.simulate import simulate
from systems import get_system

RHO = 1e6


def exact_p_rho_1d(a: float, b: float, u_nom: float, lo: float, hi: float, rho: float) -> float:
    """P_rho for one input on the row normalised exactly: min 1/2 (u - u_nom)^2 + rho s,
    a/|b| + sign(b) u + s >= 0, s >= 0, lo <= u <= hi, in rational arithmetic. The objective
    is convex and piecewise quadratic; its minimiser is the clipped vertex of one of the two
    pieces (row kept / row relaxed)."""
    A, Bs, U, L, H, R = (Fraction(v) for v in (a, b, u_nom, lo, hi, rho))
    if Bs == 0:
        return float(min(max(U, L), H))
    an, bn = A / abs(Bs), (1 if Bs > 0 else -1)
    root = -an / bn                            # row holds for bn * u >= bn * root

    def clip(v, lo_, hi_):
        return min(max(v, lo_), hi_)

    kept = (max(L, root), H) if bn > 0 else (L, min(H, root))
    relaxed = (L, min(H, root)) if bn > 0 else (max(L, root), H)
    cands = [clip(U, *kept)] if kept[0] <= kept[1] else []
    if relaxed[0] <= relaxed[1]:
        cands.append(clip(U + R * bn, *relaxed))

    def cost(u):
        return (u - U) ** 2 / 2 + R * max(Fraction(0), -(an + bn * u))
    return float(min(cands, key=cost))


def extreme(rng) -> float:
    return float(rng.choice([-1, 1]) * 10.0 ** rng.uniform(-300, 300))


def test_osqp_input_bounds_beyond_its_infinity_are_refused_in_one_line():
    for lo, hi in (([2e30], [3e30]), ([-3e30], [-2e30]), ([-1e31], [1.0])):
        with pytest.raises(ValueError, match=r"reach OSQP's infinity \(1e\+30\)"):
            QPRowSolver(lo, hi)
        with pytest.raises(ValueError, match="OSQP's infinity"):
            CBFQP((np.array(lo), np.array(hi)))
    QPRowSolver([-np.inf], [np.inf])             # no bound at all is fine


def test_row_offset_below_osqp_infinity_is_not_answered_with_the_previous_problem():
    qp, proj = QPRowSolver([-1.0], [1.0]), ProjectionRowSolver([-1.0], [1.0])
    qp.solve(np.array([[0.0]]), np.array([[[1.0]]]), np.array([[0.0]]))     # an unrelated problem first
    for a in (-2e30, -1e31, -1e300):
        r_qp = qp.solve(np.array([[a]]), np.array([[[1.0]]]), np.array([[0.0]]))
        r_pr = proj.solve(np.array([[a]]), np.array([[[1.0]]]), np.array([[0.0]]))
        assert r_qp.u[0, 0] == r_pr.u[0, 0] == exact_p_rho_1d(a, 1.0, 0.0, -1.0, 1.0, RHO) == 1.0
        assert r_qp.status[0] == r_pr.status[0] == FilterStatus.SLACK_ACTIVE


def test_extreme_rows_osqp_and_projection_match_the_exact_rational_solution():
    rng = np.random.default_rng(11)
    qp, proj = QPRowSolver([-1.5], [2.0]), ProjectionRowSolver([-1.5], [2.0])
    for i in range(400):
        a, b = extreme(rng), extreme(rng)
        u_nom = extreme(rng) if i % 4 == 0 else 3 * rng.normal()
        if i % 7 == 0:
            b = 0.0
        ref = exact_p_rho_1d(a, b, u_nom, -1.5, 2.0, RHO)
        for solver in (qp, proj):
            res = solver.solve(np.array([[a]]), np.array([[[b]]]), np.array([[u_nom]]))
            u = res.u[0, 0]
            assert math.isfinite(u) and math.isfinite(res.slack[0])
            assert res.status[0] in (FilterStatus.OK, FilterStatus.SLACK_ACTIVE), (a, b, u_nom, res)
            assert abs(u - ref) <= 1e-9 * (1 + abs(ref)), (type(solver).__name__, a, b, u_nom, u, ref)


def test_extreme_rows_with_two_inputs_and_two_rows_never_nan_and_solvers_agree():
    rng = np.random.default_rng(12)
    lo, hi = np.array([-1.0, -2.0]), np.array([1.0, 0.5])
    qp, proj, qp2 = QPRowSolver(lo, hi), ProjectionRowSolver(lo, hi), QPRowSolver(lo, hi, n_rows=2)
    for _ in range(150):
        a, b, u_nom = extreme(rng), np.array([extreme(rng), extreme(rng)]), 3 * rng.normal(size=2)
        r_qp = qp.solve(np.array([[a]]), b[None, None], u_nom[None])
        r_pr = proj.solve(np.array([[a]]), b[None, None], u_nom[None])
        np.testing.assert_allclose(r_qp.u, r_pr.u, rtol=1e-9, atol=1e-9)
        # (statuses may differ: with |b| ~ 1e200 a 1-ulp difference in u is a raw slack of 1e180)
        assert {r_qp.status[0], r_pr.status[0]} <= {FilterStatus.OK, FilterStatus.SLACK_ACTIVE}
        # a second, ordinary row: the decided extreme row must not disturb it
        a2, b2 = np.array([a, 0.3]), np.stack([b, [1.0, -0.5]])
        r2 = qp2.solve(a2[None], b2[None], u_nom[None])
        assert np.isfinite(r2.u).all() and r2.status[0] != FilterStatus.FALLBACK


def test_huge_and_tiny_gains_normalise_to_unit_rows():
    a = np.array([[3.0], [-5.0], [7.0], [1e300]])
    b = np.array([[[1e200, -1e200]], [[1e-200, 3e-200]], [[1.7e308, 1.7e308]], [[1e-10, 0.0]]])
    an, bn = normalise_rows(a, b)
    assert np.isfinite(bn).all()
    np.testing.assert_allclose(np.linalg.norm(bn, axis=-1), 1.0, rtol=1e-15)
    for i in range(3):   # an = a / ||b|| by exact rational arithmetic (squared, to avoid sqrt)
        norm2 = sum(Fraction(v) ** 2 for v in b[i, 0])
        assert float(Fraction(an[i, 0]) ** 2 * norm2 / Fraction(a[i, 0]) ** 2) == pytest.approx(1.0, rel=1e-14)
    assert an[3, 0] == np.inf                    # overflowed: a row the box decides


# ----------------------------------------------------------------------------- fault policy

def cbf_terms(h, lf, lg):
    return LieTerms(h=np.array([h]), Lf=np.array([lf]), Lg=np.array([[lg]]))


FAULTS = [cbf_terms(np.nan, 0.0, 1.0), cbf_terms(0.5, np.inf, 1.0), cbf_terms(0.5, 0.0, np.nan),
          cbf_terms(-np.inf, 1.0, 1.0)]


@pytest.mark.parametrize("make", [CBFQP, CBFProjection], ids=["osqp", "projection"])
def test_fault_holds_the_last_safe_input_by_default(make):
    system = get_system("van_der_pol")
    filt = make(system, Linear(1.0))
    x = np.array([[0.3, 0.2]])
    safe = filt.filter(x, np.array([[1.7]]), cbf_terms(0.2, -1.0, 1.0))      # row active, holds
    assert safe.status[0] == FilterStatus.OK
    relaxed = filt.filter(x, np.array([[0.0]]), cbf_terms(-5.0, -5.0, 1.0))  # infeasible: not "safe"
    assert relaxed.status[0] == FilterStatus.SLACK_ACTIVE
    for terms in FAULTS:
        for u_nom in (5.0, np.nan):
            res = filt.filter(x, np.array([[u_nom]]), terms)
            assert res.status[0] == FilterStatus.FALLBACK and res.u[0, 0] == safe.u[0, 0] and res.slack[0] == 0
    res = filt.filter(x, np.array([[np.nan]]), cbf_terms(0.2, -1.0, 1.0))   # NaN nominal, healthy barrier
    assert res.status[0] == FilterStatus.FALLBACK and res.u[0, 0] == safe.u[0, 0]
    filt.reset()
    assert filt.filter(x, np.array([[5.0]]), FAULTS[0]).u[0, 0] == 0.0      # nothing held: u_safe


def test_fault_uses_the_named_backup_controller_or_safe_input():
    system = get_system("double_integrator")
    X = np.array([[0.5, 2.0], [0.1, -0.3], [np.nan, 0.0]])
    nan3 = LieTerms2(h=np.full(3, np.nan), Lf=np.zeros(3), Lg=np.zeros((3, 1)), Lf2=np.zeros(3),
                     LgLf=np.ones((3, 1)))
    backup = HOCBFQP(system, fallback=Fallback("controller", controller="pd"))
    res = backup.filter(X, np.full((3, 1), 9.0), nan3)
    expected = np.clip(system.nominal("pd")(X[:2]), system.u_min, system.u_max)
    np.testing.assert_array_equal(res.u[:2], expected)
    assert res.u[2, 0] == 0.0                    # controller NaN at a NaN state: u_safe
    assert (res.status == FilterStatus.FALLBACK).all()
    named = HOCBFQP(system, solver="projection", fallback=Fallback("input", u_safe=(-0.5,)))
    res = named.filter(X, np.full((3, 1), 9.0), nan3)
    assert (res.u == -0.5).all() and (res.status == FilterStatus.FALLBACK).all()


def test_fallback_configuration_errors_are_one_line():
    system = get_system("double_integrator")
    with pytest.raises(ValueError, match="inside the input box"):
        CBFQP(system, fallback=Fallback("input", u_safe=(99.0,)))
    with pytest.raises(ValueError, match="needs the plant"):
        CBFQP((system.u_min, system.u_max), fallback=Fallback("controller", controller="pd"))
    with pytest.raises(KeyError, match="no nominal controller 'brake'"):
        CBFQP(system, fallback=Fallback("controller", controller="brake"))
    with pytest.raises(ValueError, match="fallback kind must be one of hold, controller, input"):
        Fallback("nominal")


def test_batch_with_nan_nominal_inputs_gives_no_nan_and_flags_only_those():
    rng = np.random.default_rng(3)
    terms = LieTerms(h=rng.uniform(0, 1, 6), Lf=rng.normal(size=6), Lg=rng.normal(size=(6, 2)))
    u_nom = rng.normal(size=(6, 2))
    u_nom[[1, 4], [0, 1]] = np.nan
    for filt in (CBFQP((-np.ones(2), np.ones(2))), CBFQP((-np.ones(2), np.ones(2)), margin=0.1)):
        res = filt.filter(None, u_nom, terms)
        assert np.isfinite(res.u).all()
        assert (res.status == FilterStatus.FALLBACK).tolist() == [False, True, False, False, True, False]


def test_simulation_through_a_barrier_fault_stays_finite_and_flags_the_steps():
    """h is NaN on a band of states the nominal loop crosses: every such step falls back."""
    system = get_system("van_der_pol")

    def value(X):
        h = 2.25 - (X ** 2).sum(1)
        return np.where(np.abs(X[:, 0] - 0.8) < 0.05, np.nan, h)

    barrier = AnalyticBarrier(value, lambda X: -2 * X, n=2, m=1)
    traj = simulate(system, barrier, CBFProjection(system, Linear(1.0)), "zero", np.array([0.5, 0.5]), 3.0, 0.01)
    fault = traj.status[0] == FilterStatus.FALLBACK
    assert fault.sum() >= 3 and np.isfinite(traj.u).all() and np.isfinite(traj.x).all()
    ok_before = np.flatnonzero(~fault[:np.argmax(fault)] & (traj.status[0, :np.argmax(fault)] == FilterStatus.OK))
    assert traj.u[0, np.argmax(fault), 0] == traj.u[0, ok_before[-1], 0]   # held


# ----------------------------------------------------------------------------- margin

def test_margin_rows_hold_with_eps_and_osqp_agrees_with_projection():
    rng = np.random.default_rng(21)
    system = get_system("van_der_pol")
    B, eps = 60, 0.3
    terms = LieTerms(h=rng.uniform(-0.2, 1, B), Lf=rng.normal(size=B) * 3, Lg=rng.normal(size=(B, 1)))
    u_nom = rng.normal(size=(B, 1)) * 3
    r_qp = CBFQP(system, Linear(2.0), margin=eps).filter(None, u_nom, terms)
    r_pr = CBFProjection(system, Linear(2.0), margin=eps).filter(None, u_nom, terms)
    np.testing.assert_allclose(r_qp.u, r_pr.u, atol=1e-9)
    np.testing.assert_array_equal(r_qp.status, r_pr.status)
    row = terms.Lf + terms.Lg[:, 0] * r_pr.u[:, 0] + 2.0 * terms.h
    ok = r_pr.status == FilterStatus.OK
    assert ok.sum() > 20 and (row[ok] >= eps - 1e-9).all()
    assert (np.abs(row[ok] - eps) < 1e-9).sum() > 5          # the margin is what binds on active rows
    plain = CBFProjection(system, Linear(2.0)).filter(None, u_nom, terms)
    assert (row[ok][np.abs(row[ok] - eps) < 1e-9] > 0).all() and not np.array_equal(plain.u, r_pr.u)


def test_margin_is_exactly_a_shift_of_the_row():
    rng = np.random.default_rng(22)
    bounds = (-np.ones(1), np.ones(1))
    B, eps = 40, 0.17
    t = LieTerms2(h=rng.uniform(0, 2, B), Lf=rng.normal(size=B), Lg=np.zeros((B, 1)), Lf2=rng.normal(size=B),
                  LgLf=rng.normal(size=(B, 1)))
    a, b = hocbf_rows(t, Linear(1.0), Tanh(2.0, 0.5))
    for solver in ("osqp", "projection"):
        with_margin = HOCBFQP(bounds, Linear(1.0), Tanh(2.0, 0.5), solver=solver, margin=eps).filter(None, 0 * t.Lg, t)
        by_hand = HOCBFQP(bounds, solver=solver).solver.solve((a - eps)[:, None], b[:, None], 0 * t.Lg)
        for name in ("u", "slack", "status"):
            assert np.array_equal(getattr(with_margin, name), getattr(by_hand, name))
    with pytest.raises(ValueError, match="margin must be a finite number >= 0"):
        CBFQP(bounds, margin=-0.1)
