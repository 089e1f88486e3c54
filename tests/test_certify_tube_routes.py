"""The order-2 sampled-data routes' refinements (training/certify/conditions.py, sampled.py):
the tube cut into a grid, the class-K term charged per state, and the network's jets taken once
per box of the coordinates it reads.  Each against an independent reference: exact cover by
sampling, torch float64 values, and scipy rollouts of the hardest inputs the filter may return."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from compiler.interval import Interval

MODELS = Path(__file__).resolve().parents[1] / "experiments" / "models"


def test_a_tube_grid_covers_its_tube_exactly_with_shared_cuts():
    from training.certify.conditions import tube_grid
    rng = np.random.default_rng(0)
    lo = rng.uniform(-2, 1, (30, 3))
    R = Interval(lo, lo + rng.uniform(1e-6, 2, (30, 3)))
    cuts = np.array([[16, 1, 2], [1, 32, 1], [4, 4, 2]] * 10)
    pieces = tube_grid(R, cuts)
    k = 32
    plo, phi = pieces.lo.reshape(30, k, 3), pieces.hi.reshape(30, k, 3)
    assert np.all(plo >= R.lo[:, None]) and np.all(phi <= R.hi[:, None]) and np.all(plo <= phi)
    volume = np.prod(phi - plo, axis=2).sum(axis=1)
    assert np.allclose(volume, np.prod(R.hi - R.lo, axis=1), rtol=1e-12)
    points = R.lo[:, None] + rng.uniform(0, 1, (30, 2000, 3)) * (R.hi - R.lo)[:, None]
    points[:, :8] = np.where(rng.uniform(size=(30, 8, 3)) < 0.5, R.lo[:, None], R.hi[:, None])   # corners
    inside = np.all((points[:, :, None] >= plo[:, None]) & (points[:, :, None] <= phi[:, None]), axis=3)
    assert inside.any(axis=2).all(), "a point of the tube lies in no piece"
    for b in range(3):                                   # every interior cut is some piece's lo and another's hi
        for d in range(3):
            assert set(np.unique(plo[b, :, d])) - {R.lo[b, d]} == set(np.unique(phi[b, :, d])) - {R.hi[b, d]}


@pytest.fixture(scope="module")
def pendulum():
    from training.certify.problem import load_problem
    return load_problem(MODELS / "pendulum.onnx", MODELS / "pendulum.json")


def _torch_net(problem):
    """The shipped network in float64 torch, from its ONNX weights (independent of the certifier's IR)."""
    import onnx
    from onnx import numpy_helper
    model = onnx.load(str(MODELS / "pendulum.onnx"))
    w = {i.name: torch.tensor(numpy_helper.to_array(i), dtype=torch.float64) for i in model.graph.initializer}
    names = sorted({k.split(".")[0] for k in w}, key=int)

    def net(x):
        z = x
        for j, name in enumerate(names):
            z = z @ w[f"{name}.weight"].T + w[f"{name}.bias"]
            if j < len(names) - 1:
                z = torch.nn.functional.softplus(z)
        return z[..., 0]
    return net


def test_network_jets_are_taken_once_per_box_of_the_coordinates_it_reads(pendulum, monkeypatch):
    """The pendulum's h reads theta alone: boxes that differ only in theta_dot share one jet
    computation, and the jets equal the full computation's and hold torch's float64 values."""
    import compiler.bounds
    from training.certify.terms import _enclose
    rng = np.random.default_rng(1)
    theta = np.repeat(rng.uniform(-0.7, 0.7, 40), 4)
    lo = np.stack([theta, rng.uniform(-1.2, 1.0, 160)], axis=1)
    box = Interval(lo, lo + np.repeat(rng.uniform(0, 0.02, (40, 2)), 4, axis=0))
    full = compiler.bounds.enclose(pendulum.model, box, order=2, float32=True)
    sizes = []
    real = compiler.bounds.enclose
    monkeypatch.setattr(compiler.bounds, "enclose", lambda m, b, **k: sizes.append(len(b.lo)) or real(m, b, **k))
    jets = _enclose(pendulum.model, box, 2, True)
    assert sizes == [40]
    for name in ("h", "grad", "hess"):
        a, b = getattr(jets, name), getattr(full, name)
        assert np.allclose(a.lo, b.lo, rtol=1e-13, atol=1e-14) and np.allclose(a.hi, b.hi, rtol=1e-13, atol=1e-14)
    assert np.allclose(jets.rounding.grad, full.rounding.grad, rtol=1e-12)
    net = _torch_net(pendulum)
    x = torch.tensor(box.lo + rng.uniform(0, 1, box.lo.shape) * (box.hi - box.lo), requires_grad=True)
    h = net(x)
    (g,) = torch.autograd.grad(h.sum(), x)
    assert np.all((jets.h.lo <= h.detach().numpy()) & (h.detach().numpy() <= jets.h.hi))
    assert np.all((jets.grad.lo <= g.numpy()) & (g.numpy() <= jets.grad.hi))


MARGIN = 1.7      # the shipped card's filter margin


def _level_bound(problem, box, cuts):
    """The level-drop route's bound on min over the period of psi1(x(t)) / T per box, with the
    tube's terms taken over a grid of ``cuts`` pieces (the least over the pieces)."""
    from training.certify.conditions import _level_route, _level_rounding, tube_grid
    from training.certify.sampled import tube
    from training.certify.terms import lie_terms, plant_terms
    plant = plant_terms(problem.plant, box, 2)
    t32 = lie_terms(problem.model, plant, box, 2, problem.gains, float32=True)
    R = tube(problem.plant, box, problem.u_lo, problem.u_hi, problem.dt).R
    k = int(np.prod(cuts))
    pieces = tube_grid(R, np.tile(cuts, (len(box.lo), 1)))
    t64 = lie_terms(problem.model, plant_terms(problem.plant, pieces, 2), pieces, 2, problem.gains, float32=False)
    rep = np.repeat(np.arange(len(box.lo)), k)
    eps = np.full(len(rep), MARGIN)
    error = _level_rounding(problem, t32, rep, plant.f[rep])
    return _level_route(problem, t32, rep, t64, eps, error).reshape(-1, k).min(axis=1)


def _psi1_terms(net, x, params, alpha1):
    """h, psi1 = L_f h + alpha1 h, and the row's q = L_f^2 h + alpha1 L_f h, a = L_G L_f h (torch
    float64; h reads theta alone, so L_f h = h'(theta) theta_dot)."""
    th = torch.tensor(x[:, 0], requires_grad=True)
    h = net(torch.stack([th, torch.zeros_like(th)], -1))
    (d1,) = torch.autograd.grad(h.sum(), th, create_graph=True)
    (d2,) = torch.autograd.grad(d1.sum(), th)
    h, d1, d2 = h.detach().numpy(), d1.detach().numpy(), d2.numpy()
    om, acc = x[:, 1], params.g / params.L * np.sin(x[:, 0])
    lf = d1 * om
    q = d2 * om ** 2 + d1 * acc + alpha1 * lf
    a = d1 / (params.mass * params.L ** 2)
    return h, lf + alpha1 * h, q, a


def _admissible(q, a, psi1, problem, eps, x):
    """The input interval the filter may return at each state: the barrier's row q + a u +
    alpha2 psi1 >= eps and both theta_dot face rows (c' >= -gamma c + margin), in the input box."""
    p = problem.system.params
    inertia = p.mass * p.L ** 2
    lo, hi = np.full(len(q), problem.u_lo[0]), np.full(len(q), problem.u_hi[0])
    need = eps - q - problem.gains["alpha2"] * psi1
    with np.errstate(divide="ignore", invalid="ignore"):
        lo = np.where(a > 0, np.maximum(lo, need / a), lo)
        hi = np.where(a < 0, np.minimum(hi, need / a), hi)
    acc = p.g / p.L * np.sin(x[:, 0])
    for face in problem.faces:            # c = side (bound - theta_dot) >= 0; c' = -side (acc + u / inertia)
        c = face.side * (face.bound - x[:, 1])
        limit = inertia * (face.gamma * c - face.margin) / face.side - inertia * acc
        if face.side > 0:
            hi = np.minimum(hi, limit)
        else:
            lo = np.maximum(lo, limit)
    return lo, hi


@pytest.mark.parametrize("cuts", [[1, 1], [8, 2]], ids=["whole_tube", "grid"])
def test_the_level_route_bounds_psi1_along_every_admissible_held_input(pendulum, cuts):
    """The level-drop route with its per-state class-K charge, over the whole tube and over a
    grid of it, is a lower bound of min over the period of psi1(x(t)) / T: checked by scipy
    rollouts from states of small boxes of the shipped pendulum's set, under a spread of the
    inputs the filter may return there (hardest first).  Boxes sit at levels up to 0.15, where
    the bound without the (1 - alpha2 T) factor on the level would exceed the rollouts' value,
    and the check must be tight somewhere (bound >= 0.8 of the rollout's) or it says nothing."""
    from scipy.integrate import solve_ivp
    p = pendulum
    params, alpha1 = p.system.params, p.gains["alpha1"]
    net = _torch_net(p)
    rng = np.random.default_rng(2)
    x = np.stack([rng.uniform(-0.75, 0.75, 40_000), rng.uniform(-1.2, 1.2, 40_000)], axis=1)
    h, psi1, _, _ = _psi1_terms(net, x, params, alpha1)
    centres = x[(psi1 > 0.002) & (psi1 < 0.15) & (h > 0.01)][:40]
    box = Interval(centres - 1e-4, centres + 1e-4)
    bound = _level_bound(p, box, np.array(cuts)) * p.dt
    field = lambda u: (lambda _, z: [z[1], params.g / params.L * np.sin(z[0]) + u / (params.mass * params.L ** 2)])  # noqa: E731
    tight = 0
    for i in np.flatnonzero(np.isfinite(bound)):
        starts = rng.uniform(box.lo[i], box.hi[i], size=(4, 2))
        h0, s0, q0, a0 = _psi1_terms(net, starts, params, alpha1)
        lo, hi = _admissible(q0, a0, s0, p, MARGIN, starts)
        for x0, l, u_hi, slope, keep in zip(starts, lo, hi, a0, (h0 >= 0) & (s0 >= 0) & (lo <= hi)):
            if not keep:
                continue
            hardest, other = (l, u_hi) if slope > 0 else (u_hi, l)
            for u in np.linspace(hardest, other, 3):
                sol = solve_ivp(field(u), (0.0, p.dt), x0, rtol=1e-11, atol=1e-13, dense_output=True)
                _, run, _, _ = _psi1_terms(net, sol.sol(np.linspace(0.0, p.dt, 101)).T, params, alpha1)
                assert run.min() >= bound[i] - 1e-12, f"psi1 drops to {run.min()} below the bound {bound[i]}"
                tight += bool(bound[i] > 0 and bound[i] >= 0.8 * run.min())
    assert tight >= 10, f"the bound is within 80% of the rollouts only {tight} times: the check says little"
