"""compiler/bounds_linear.py: the linear relaxation (CROWN-style back substitution) of h over
a box holds torch float64 h at sampled states for random networks of every activation and with
a periodic (sin/cos) embedding, holds the float32 header's h with its rounding bound, and is
tighter than the interval enclosure on wide boxes of deeper networks.

training/certify/centred.py: the centred (mean-value) form of the order-1 Lie row
psi = grad h . (f + G u*) over a box holds every sampled state's value, computed independently
(torch float64 autograd for grad h, sympy-lambdified numpy float64 for f and G), for random
networks of every twice-differentiable activation and three plants; with the float32 gradient
rounding, it also holds the compiled float32 header's row.  And it pays: on small boxes it is
tighter than the interval product the certifier used alone.

Scope: order 1 only; the order-2 row (L_f^2 h ...) would need third derivatives and keeps the
interval bounds.  Piecewise-linear and ELU networks have no second derivative: the certifier
does not call the centred form for them (``conditions._tighter_row`` checks ``Problem.smooth``).
"""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
import torch

from compiler.api import load_model
from compiler.bounds import enclose
from compiler.bounds_linear import linear_bounds
from compiler.interval import Interval
from systems import get_system
from training.certify.centred import best_vertex, centred_row
from training.certify.problem import plant_enclosure
from training.certify.terms import plant_terms

from test_bounds import assert_contains, random_boxes, random_net, samples_in, torch_jets
from training.architectures import ACTIVATION_NAMES, activation_module

SMOOTH = ("tanh", "sigmoid", "softplus", "silu", "gelu", "gelu_tanh")
SYSTEMS = ("van_der_pol", "unicycle", "obstacle_avoidance")
TOL = 1e-10


@pytest.mark.parametrize("act", ACTIVATION_NAMES)
def test_every_sampled_h_lies_in_its_boxes_linear_bounds(act):
    rng = np.random.default_rng(abs(hash(act)) % 2 ** 32)
    for trial, (inputs, hidden) in enumerate([(2, 1), (3, 2), (4, 3)]):
        net = random_net(act, inputs, hidden, seed=trial, gain=1.5)
        model = load_model(net)
        box = random_boxes(rng, net, inputs, 96)
        lin = linear_bounds(model, box)
        x = samples_in(rng, box, 16)
        h = torch_jets(net, x.reshape(-1, inputs))[0].reshape(16, 96)
        assert_contains(lin.broadcast_to((16, 96)), h, f"{act} h")
        assert np.all(lin.subset(enclose(model, box, order=1).h))      # never looser than the intervals


def test_linear_bounds_through_the_periodic_embedding_hold_torch_values():
    from compiler.periodic import periodic_embedding
    rng = np.random.default_rng(3)
    torch.manual_seed(0)
    net = torch.nn.Sequential(periodic_embedding(3, {2: 2 * np.pi}), torch.nn.Linear(4, 8), torch.nn.Tanh(),
                              torch.nn.Linear(8, 8), torch.nn.Softplus(), torch.nn.Linear(8, 1)).double()
    model = load_model(net)
    centre = rng.uniform(-4, 4, (200, 3))
    width = 10.0 ** rng.uniform(-6, 0.5, (200, 3))
    box = Interval(centre - width / 2, centre + width / 2)
    lin = linear_bounds(model, box)
    x = samples_in(rng, box, 16)
    with torch.no_grad():
        h = net(torch.tensor(x.reshape(-1, 3))).numpy().reshape(16, 200)
    assert_contains(lin.broadcast_to((16, 200)), h, "periodic h")


def test_linear_bounds_hold_the_float32_header_with_its_rounding():
    from cbfsim.runtime import compile_barrier
    from conftest import all_activations_net
    rng = np.random.default_rng(4)
    net = all_activations_net(1, inputs=3, gain=2.0, seed=2).double()
    model = load_model(net)
    centre = rng.uniform(-2, 2, (300, 3))
    width = 10.0 ** rng.uniform(-7, 0, (300, 3))
    box = Interval(centre - width, centre + width)
    e = enclose(model, box, order=1, float32=True).rounding.h
    lin = linear_bounds(model, box, e)
    x = samples_in(rng, box, 4).reshape(-1, 3)
    h32, _, _ = compile_barrier(net, inputs=3, order=1, dtype="float").lie(
        x, np.zeros_like(x), np.broadcast_to(np.eye(3), (len(x), 3, 3)).copy())
    assert np.all(lin.broadcast_to((4, 300)).contains(h32.reshape(4, 300)))


def test_linear_bounds_are_tighter_than_intervals_on_wide_boxes_of_deep_networks():
    rng = np.random.default_rng(5)
    for act in ("softplus", "tanh", "relu"):
        net = random_net(act, 3, 3, seed=1, gain=1.0)
        model = load_model(net)
        centre = rng.uniform(-1, 1, (100, 3))
        box = Interval(centre - 0.3, centre + 0.3)
        lin, iv = linear_bounds(model, box), enclose(model, box, order=1).h
        assert np.median((iv.hi - iv.lo) / (lin.hi - lin.lo)) > 1.1, act


def reference_plant(system):
    """f (S, n) and G (S, n, m) in float64 from the sympy definition (numpy lambdify)."""
    f = sp.lambdify(system.x_sym, list(system.f_expr), "numpy")
    G = sp.lambdify(system.x_sym, [list(row) for row in system.G_expr.tolist()], "numpy")

    def fG(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cols = [x[:, i] for i in range(x.shape[1])]
        fx = np.stack([np.broadcast_to(np.asarray(v, float), (len(x),)) for v in f(*cols)], axis=1)
        Gx = np.stack([np.stack([np.broadcast_to(np.asarray(v, float), (len(x),)) for v in row], axis=1)
                       for row in G(*cols)], axis=1)
        return fx, Gx
    return fG


def torch_grad(net, x: np.ndarray) -> np.ndarray:
    X = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(net(X)[:, 0].sum(), X)
    return g.numpy()


def boxes(rng, system, count: int) -> Interval:
    lo, hi = (np.asarray(v, float) for v in system.domain)
    centre = rng.uniform(lo, hi, (count, system.n))
    width = 10.0 ** rng.uniform(-6, -0.3, (count, system.n))
    return Interval(centre - width / 2, centre + width / 2)


def sampled_rows(net, fG, x: np.ndarray, u: np.ndarray) -> np.ndarray:
    """psi at states x (S, B, n) with the box's input u (B, m)."""
    S, B, n = x.shape
    flat = x.reshape(-1, n)
    f, G = fG(flat)
    F = f + np.einsum("snm,sm->sn", G, np.broadcast_to(u, (S, *u.shape)).reshape(-1, u.shape[1]))
    return np.sum(torch_grad(net, flat) * F, axis=1).reshape(S, B)


@pytest.mark.parametrize("act", SMOOTH)
@pytest.mark.parametrize("name", SYSTEMS)
def test_every_sampled_row_lies_above_the_centred_bound(act, name):
    rng = np.random.default_rng(abs(hash((act, name))) % 2 ** 32)
    system = get_system(name)
    plant, fG = plant_enclosure(system), reference_plant(system)
    for trial, hidden in enumerate((1, 2)):
        net = random_net(act, system.n, hidden, seed=trial, gain=2.0)
        model = load_model(net)
        box = boxes(rng, system, 64)
        u = rng.choice([0, 1], (64, system.m)).astype(float)
        u = np.where(u > 0, system.u_max, system.u_min)
        row = centred_row(model, plant, box, u, None)
        x = samples_in(rng, box, 16)
        psi = sampled_rows(net, fG, x, u)
        tol = TOL * (1.0 + np.abs(psi))
        below = psi < row.lower[None, :] - tol
        assert not below.any(), f"{act}/{name}: psi {psi[below][0]!r} below the bound"
        assert np.mean(np.isfinite(row.lower)) > 0.5         # the bound exists on most boxes


@pytest.mark.parametrize("name", SYSTEMS)
def test_the_centred_bound_beats_the_interval_product_on_small_boxes(name):
    """Why it exists: the interval product grad h(B) . F(B) loses O(width), the centred form O(width^2)."""
    rng = np.random.default_rng(7)
    system = get_system(name)
    plant = plant_enclosure(system)
    net = random_net("softplus", system.n, 2, seed=3, gain=1.0)
    model = load_model(net)
    lo, hi = (np.asarray(v, float) for v in system.domain)
    centre = rng.uniform(lo, hi, (200, system.n))
    box = Interval(centre - 0.01, centre + 0.01)
    u = best_vertex(np.zeros((200, system.m)), system.u_min, system.u_max)
    row = centred_row(model, plant, box, u, None)
    terms = plant_terms(plant, box, 1)
    F = terms.f + (terms.G * Interval.point(u)[:, None, :]).sum(-1)
    product = (enclose(model, box, order=1).grad * F).sum(-1)
    assert np.median(row.lower - product.lo) > 0


def header_row_case():
    """A VdP case for the float32 header's row: (net, model, plant, box (200 boxes), their inputs u,
    the float32 gradient's rounding bound e, the header's row at 6 states per box (6, 200))."""
    from cbfsim.runtime import compile_barrier
    from conftest import all_activations_net
    rng = np.random.default_rng(11)
    system = get_system("van_der_pol")
    plant, fG = plant_enclosure(system), reference_plant(system)
    net = all_activations_net(2, inputs=2, gain=2.0, seed=1).double()
    model = load_model(net)
    box = boxes(rng, system, 200)
    u = np.where(rng.uniform(size=(200, 1)) > 0.5, system.u_max, system.u_min)
    e = enclose(model, box, order=1, float32=True).rounding.grad
    lib = compile_barrier(net, inputs=2, order=1, dtype="float")
    flat = samples_in(rng, box, 6).reshape(-1, 2)
    _, _, grad32 = lib.lie(flat, np.zeros_like(flat), np.broadcast_to(np.eye(2), (len(flat), 2, 2)).copy())
    f, G = fG(flat)
    psi32 = np.sum(grad32 * (f + np.einsum("snm,sm->sn", G, np.tile(u, (6, 1)))), axis=1).reshape(6, 200)
    return model, plant, box, u, e, psi32


def test_the_float32_header_row_lies_above_the_bound_with_its_rounding():
    """With the float32 enclosure's gradient rounding bound subtracted, the header's own
    gradient (compiled float32 header) dotted with f + G u* stays above the bound."""
    model, plant, box, u, e, psi32 = header_row_case()
    row = centred_row(model, plant, box, u, e)
    assert np.all(psi32 >= row.lower[None, :])
    assert np.mean(np.isfinite(row.lower)) > 0.5


def test_a_box_across_softplus_threshold_gets_no_centred_bound():
    """Softplus' threshold is a value discontinuity: no mean-value form holds across it."""
    system = get_system("van_der_pol")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 1), torch.nn.Softplus(beta=1.0, threshold=2.0),
                              torch.nn.Linear(1, 1)).double()
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1.0, 0.0]]))
        net[0].bias.zero_()
    model = load_model(net)
    box = Interval(np.array([[1.5, 0.0], [-1.0, 0.0]]), np.array([[2.5, 0.1], [-0.5, 0.1]]))
    row = centred_row(model, plant_enclosure(system), box, np.ones((2, 1)), None)
    assert row.lower[0] == -np.inf and np.isfinite(row.lower[1])


def test_baumann_centre_loses_the_least_of_any_centre_in_the_box():
    """The mean-value form's lower bound is psi(c) + min over x in B, d in D of d . (x - c); its
    second term, for the chosen centre (``baumann_centre``), is the largest over a grid of 201
    centres per coordinate (brute force), and zero along a coordinate where D has one sign."""
    from training.certify.centred import baumann_centre
    rng = np.random.default_rng(7)
    B = 400
    lo = rng.normal(size=(B, 1)) * 2
    hi = lo + rng.uniform(1e-3, 2, size=(B, 1))
    a, b = rng.normal(size=(B, 1)), rng.normal(size=(B, 1))
    b[:80] = np.abs(b[:80]) + np.abs(a[:80])            # some one-signed enclosures
    D = Interval(np.minimum(a, b), np.maximum(a, b))
    centre = baumann_centre(D, Interval(lo, hi))

    def loss(c):                                       # min of d (x - c) over the box's ends and D's ends
        return np.min([d * (x - c) for d in (D.lo, D.hi) for x in (lo, hi)], axis=0)

    grid = lo + (hi - lo) * np.linspace(0, 1, 201)[None, :]
    best = np.max(loss(grid), axis=1)
    assert np.all((lo <= centre) & (centre <= hi))
    assert np.all(loss(centre)[:, 0] >= best - 1e-12)         # no grid centre beats it
    one_signed = (D.lo >= 0) | (D.hi <= 0)
    assert np.all(np.abs(loss(centre)[one_signed]) <= 1e-15)


@pytest.mark.parametrize("act", ["softplus", "tanh", "relu"])
def test_the_lower_plane_holds_torch_h_on_every_part_of_its_box(act):
    """``lower_plane``: over random sub-boxes of each box (``LowerPlane.over``), the plane's
    lower bound is below torch float64 h at samples in them, through a periodic embedding too;
    and over the whole box it is never above ``linear_bounds``' lower end."""
    from compiler.bounds_linear import lower_plane
    from compiler.periodic import periodic_embedding
    rng = np.random.default_rng(8)
    torch.manual_seed(1)
    net = torch.nn.Sequential(periodic_embedding(3, {2: 2 * np.pi}), torch.nn.Linear(4, 8), activation_module(act),
                              torch.nn.Linear(8, 8), activation_module(act), torch.nn.Linear(8, 1)).double()
    model = load_model(net)
    centre = rng.uniform(-3, 3, (150, 3))
    width = 10.0 ** rng.uniform(-4, 0.3, (150, 3))
    box = Interval(centre - width / 2, centre + width / 2)
    plane = lower_plane(model, box)
    whole = plane.over(Interval(box.lo[:, None, :], box.hi[:, None, :]))[:, 0]
    assert np.all(whole <= linear_bounds(model, box).lo + 1e-12)
    a = rng.uniform(box.lo[:, None, :], box.hi[:, None, :], (150, 5, 3))
    b = rng.uniform(box.lo[:, None, :], box.hi[:, None, :], (150, 5, 3))
    cells = Interval(np.minimum(a, b), np.maximum(a, b))
    bound = plane.over(cells)                                               # (150, 5)
    t = rng.uniform(size=(12, 150, 5, 3))
    x = cells.lo + t * (cells.hi - cells.lo)
    with torch.no_grad():
        h = net(torch.tensor(x.reshape(-1, 3))).numpy().reshape(12, 150, 5)
    assert np.all(bound[None] <= h + TOL * (1 + np.abs(h)))
    assert np.mean(bound > -np.inf) > 0.99


def test_cells_counted_inside_the_set_hold_only_states_the_header_puts_in_it():
    """Coverage's plane cells (``coverage.plane_cells``) on boxes straddling the shipped VdP
    set's edge: every sampled state of a cell counted inside has h >= 0 by the compiled float32
    header, and the cells do count a real share of the straddling volume."""
    from pathlib import Path
    from cbfsim.runtime import compile_barrier
    from training.certify.build import build_problem
    from training.certify.coverage import plane_cells
    root = Path(__file__).resolve().parent.parent / "experiments" / "models"
    problem = build_problem(root / "vdp.onnx", root / "vdp.json")
    rng = np.random.default_rng(9)
    x = rng.uniform(problem.lo, problem.hi, (20000, 2))
    lib = compile_barrier(root / "vdp.onnx", inputs=1, order=1, dtype="float")

    def header_h(states):
        return lib.lie(states, np.zeros_like(states), np.zeros((len(states), 2, 1)))[0]

    h = header_h(x)
    near = x[np.abs(h) < 0.02][:300]                      # boxes of width 0.05 around edge states
    lo, hi = near - 0.025, near + 0.025
    counted, straddling = 0, 0
    for cells, inside, _ in plane_cells(problem, lo, hi, np.array([True, True])):
        pts = cells.lo[inside] + rng.uniform(size=(8,) + cells.lo[inside].shape) * (cells.hi - cells.lo)[inside]
        pts = pts.reshape(-1, 2)
        h32 = header_h(pts)
        assert np.all(h32 >= 0), pts[np.argmin(h32)]
        counted += int(inside.sum())
        straddling += inside.size
    assert counted > 0.2 * straddling
