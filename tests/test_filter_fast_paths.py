"""The filters' single-state fast paths (cbfsim/filters/_fast.py) give the same bits as the
general array path, over random closed-loop-like sequences and edge cases, and
CBFSIM_FAST_PATHS=0 switches them off."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from cbfsim.barriers import LieTerms, LieTerms2
from cbfsim.classk import Linear, Tanh
from cbfsim.filters import CBFQP, HOCBFQP, CBFProjection, FilterStatus, ProjectionRowSolver, QPRowSolver
from cbfsim.filters import _fast
from cbfsim.filters.base import set_fast_paths
from systems import get_system

EDGE_VALUES = [0.0, -0.0, 1e-300, -1e-200, 1e-150, 3e-141, 1e-7, 1.0, -2.0, 2.0, 1e6, -1e6 - 1, 1e7, 1e141,
               -1e160, 1e300, -1e308, np.inf, -np.inf, np.nan]


def random_steps(rng, count: int, order: int):
    """(u_nom (1, 1), terms) pairs: mostly smooth random walks (warm starts matter), with
    edge values spliced into every field."""
    h, lf, lg = 0.5, 0.0, 1.0
    for i in range(count):
        h, lf, lg = h + 0.1 * rng.normal(), lf + 0.3 * rng.normal(), lg + 0.2 * rng.normal()
        vals = [h, lf, lg, 3 * rng.normal(), rng.normal(), rng.normal()]
        if i % 3 == 0:   # an edge value in a random field
            vals[int(rng.integers(0, 6))] = EDGE_VALUES[int(rng.integers(0, len(EDGE_VALUES)))]
        if i % 11 == 0:  # the row at a tie: a + b u = 0 exactly at the clipped nominal
            vals[1], vals[0], vals[3] = -vals[2] * 0.5, 0.0, 0.5
        u_nom = np.array([[vals[3]]])
        if order == 1:
            yield u_nom, LieTerms(h=np.array([vals[0]]), Lf=np.array([vals[1]]), Lg=np.array([[vals[2]]]))
        else:
            yield u_nom, LieTerms2(h=np.array([vals[0]]), Lf=np.array([vals[1]]), Lg=np.zeros((1, 1)),
                                   Lf2=np.array([vals[4]]), LgLf=np.array([[vals[2]]]))


FILTERS = {
    "cbf-osqp": (1, lambda s, eps: CBFQP(s, Linear(2.0), margin=eps)),
    "cbf-projection": (1, lambda s, eps: CBFProjection(s, Linear(2.0), margin=eps)),
    "cbf-osqp-tanh": (1, lambda s, eps: CBFQP(s, Tanh(2.0, 0.5), margin=eps)),          # general rows, fast solve
    "hocbf-osqp": (2, lambda s, eps: HOCBFQP(s, Linear(1.5), Tanh(2.0, 0.7), margin=eps)),
    "hocbf-projection": (2, lambda s, eps: HOCBFQP(s, Linear(1.5), Linear(3.0), solver="projection", margin=eps)),
}


@pytest.mark.parametrize("margin", [0.0, 0.25])
@pytest.mark.parametrize("kind", sorted(FILTERS))
def test_fast_path_bits_equal_general_path(kind, margin, monkeypatch):
    order, make = FILTERS[kind]
    system = get_system("van_der_pol")
    fast, general = make(system, margin), make(system, margin)
    taken = {"n": 0}
    for solver_type, twin in list(_fast._TWINS.items()):
        def counting(*args, _twin=twin):
            out = _twin(*args)
            taken["n"] += out is not None
            return out
        monkeypatch.setitem(_fast._TWINS, solver_type, counting)
    rng = np.random.default_rng(len(kind) + int(10 * margin))
    steps = list(random_steps(rng, 400, order))
    statuses = set()
    for u_nom, terms in steps:
        with np.errstate(over="ignore", invalid="ignore"):     # alpha of a huge h overflows
            set_fast_paths(True)
            r1 = fast.filter(np.zeros((1, 2)), u_nom, terms)
            set_fast_paths(False)
            try:
                r2 = general.filter(np.zeros((1, 2)), u_nom, terms)
            finally:
                set_fast_paths(True)
        for name in ("u", "slack", "status"):
            assert np.array_equal(getattr(r1, name), getattr(r2, name)), (name, u_nom, terms, r1, r2)
        statuses.add(int(r1.status[0]))
    assert taken["n"] > 250, taken                  # the fast path really ran on most steps
    assert {FilterStatus.OK, FilterStatus.FALLBACK} <= statuses
    if hasattr(fast.solver, "stats"):
        assert fast.solver.stats == general.solver.stats


def test_switch_turns_every_filter_fast_path_off(monkeypatch):
    calls = []
    for solver_type in (QPRowSolver, ProjectionRowSolver):
        monkeypatch.setitem(_fast._TWINS, solver_type, lambda *a: calls.append(a))
    terms = LieTerms(h=np.array([0.1]), Lf=np.array([-1.0]), Lg=np.array([[1.0]]))
    for filt in (CBFQP((-np.ones(1), np.ones(1))), CBFProjection((-np.ones(1), np.ones(1)))):
        previous = set_fast_paths(False)
        try:
            filt.filter(None, np.array([[0.0]]), terms)
        finally:
            set_fast_paths(previous)
        assert calls == []
        filt.filter(None, np.array([[0.0]]), terms)
        assert len(calls) == 1
        calls.clear()
    # the environment variable sets the switch when the package is imported
    code = "from cbfsim.filters.base import fast_paths_enabled as f; print(f())"
    for value, expected in (("0", "False"), ("1", "True")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "CBFSIM_FAST_PATHS": value}).stdout.strip()
        assert out == expected


@pytest.mark.parametrize("kind", ["projection", "osqp"])
@pytest.mark.parametrize("fast", [True, False])
def test_a_state_scaled_margin_is_the_constant_margin_eps_sigma_x_at_each_state(kind, fast):
    """A filter with margin eps (bias + w.x) (training/margin.py) returns, at every state, the
    bits of a filter whose constant margin is that state's eps (bias + w.x), one state at a
    time (fast path or not) and in a batch; the reference is the projection's closed form."""
    from cbfsim.filters.projection import project_halfspace_box
    from training.margin import margin_from
    rng = np.random.default_rng(4)
    scaled = margin_from(0.3, [0.5, 0.0, 0.25])
    make = (lambda m: CBFProjection((np.array([-2.0]), np.array([2.0])), Linear(1.0), margin=m)) if kind == "projection" \
        else (lambda m: CBFQP((np.array([-2.0]), np.array([2.0])), Linear(1.0), margin=m))
    x = rng.uniform(-1.5, 1.5, size=(40, 2))
    h, lf, lg = rng.uniform(-0.5, 1, 40), rng.normal(size=40), rng.normal(size=40)
    u_nom = rng.uniform(-3, 3, size=40)
    eps = 0.3 * (0.5 + 0.25 * x[:, 1])
    previous = set_fast_paths(fast)
    try:
        filt, one = make(scaled), []
        for i in range(40):
            filt.reset()                  # no warm start: each state is solved as from scratch
            terms = LieTerms(h[i:i + 1], lf[i:i + 1], lg[i:i + 1, None])
            one.append(filt.filter(x[i:i + 1], u_nom[i:i + 1, None], terms).u[0, 0])
            assert one[i] == make(float(eps[i])).filter(x[i:i + 1], u_nom[i:i + 1, None], terms).u[0, 0]
        batch = make(scaled).filter(x, u_nom[:, None], LieTerms(h, lf, lg[:, None])).u[:, 0]
    finally:
        set_fast_paths(previous)
    gain = np.abs(lg)                   # the filters' rows are normalised to unit gain
    exact = project_halfspace_box((lf + h - eps) / gain, (lg / gain)[:, None], u_nom[:, None], np.array([-2.0]),
                                  np.array([2.0]), slack_penalty=1e6).u[:, 0]
    np.testing.assert_allclose(batch, exact, atol=1e-7)
    np.testing.assert_allclose(one, exact, atol=1e-7)
