"""compiler/bounds_lie.py: the linear forms of L_f h and L_G h over a box hold every sampled
state's value, computed independently (torch float64 autograd for grad h, sympy-lambdified
numpy float64 for f and G), for random networks of every activation on three plants and
through the periodic embedding; with the float32 gradient rounding subtracted, the row's lower
bound also holds the compiled float32 header's row.  A box across Softplus' threshold (a value
jump) is bounded by hulls that hold both sides.  And they pay: on the Dubins car's edge boxes
they lose a small part of what the interval product loses, and less than the centred form
(whose own tests are in test_linear_relaxation.py; the certifier takes the better of the two).
The row traded against h (``lower_with_level``) holds every sampled row in its band of h.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from compiler.api import load_model
from compiler.bounds import enclose
from compiler.bounds_lie import lie_forms
from compiler.interval import Interval
from systems import get_system
from training.architectures import ACTIVATION_NAMES, activation_module
from training.certify.centred import centred_row
from training.certify.problem import plant_enclosure
from training.certify.terms import plant_terms

from test_bounds import random_net, samples_in
from test_linear_relaxation import boxes, header_row_case, reference_plant, torch_grad

SYSTEMS = ("van_der_pol", "unicycle", "obstacle_avoidance")
TOL = 1e-10


def forms_over(model, plant, box: Interval):
    centre = Interval.point(np.clip(box.mid, box.lo, box.hi))
    return lie_forms(model, box, plant_terms(plant, centre, 1, with_input_jacobian=True),
                     plant_terms(plant, box, 1, with_input_jacobian=True))


def sampled_lie(net, fG, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """L_f h (S, B) and L_G h (S, B, m) at states x (S, B, n), by torch autograd and numpy f, G."""
    S, B, n = x.shape
    flat = x.reshape(-1, n)
    f, G = fG(flat)
    grad = torch_grad(net, flat)
    return np.sum(grad * f, axis=1).reshape(S, B), np.einsum("sn,snm->sm", grad, G).reshape(S, B, -1)


def assert_holds(forms, lf, lg, rng, what: str):
    """Every sampled L_f h and L_G h lies in its form's range, and every sampled row at a random
    input lies above the row's lower bound."""
    S, B, m = lg.shape
    ranges = forms.ranges()
    for k, values in enumerate([lf] + [lg[..., j] for j in range(m)]):
        tol = TOL * (1.0 + np.abs(values))
        outside = (values < ranges[k].lo - tol) | (values > ranges[k].hi + tol)
        assert not outside.any(), f"{what}: Lie term {k} {values[outside][0]!r} outside its form"
    u = rng.uniform(-2, 2, (B, m))
    row = lf + np.einsum("sbm,bm->sb", lg, u)
    below = row < forms.lower(u)[None, :] - TOL * (1.0 + np.abs(row))
    assert not below.any(), f"{what}: row {row[below][0]!r} below the bound"


@pytest.mark.parametrize("act", ACTIVATION_NAMES)
@pytest.mark.parametrize("name", SYSTEMS)
def test_every_sampled_lie_term_lies_in_its_form(act, name):
    rng = np.random.default_rng(100 + 10 * ACTIVATION_NAMES.index(act) + SYSTEMS.index(name))
    system = get_system(name)
    plant, fG = plant_enclosure(system), reference_plant(system)
    for trial, hidden in enumerate((1, 2)):
        net = random_net(act, system.n, hidden, seed=trial, gain=2.0)
        box = boxes(rng, system, 64)
        forms = forms_over(load_model(net), plant, box)
        lf, lg = sampled_lie(net, fG, samples_in(rng, box, 16))
        assert_holds(forms, lf, lg, rng, f"{act}/{name}/{hidden}")
        assert np.mean(np.isfinite(forms.lower(np.zeros((64, system.m))))) > 0.5   # a bound on most boxes


@pytest.mark.parametrize("act", ["softplus", "tanh", "relu", "gelu"])
def test_the_forms_hold_through_the_periodic_embedding(act):
    from compiler.periodic import periodic_embedding
    rng = np.random.default_rng(5)
    system = get_system("unicycle")
    plant, fG = plant_enclosure(system), reference_plant(system)
    torch.manual_seed(2)
    net = torch.nn.Sequential(periodic_embedding(3, {2: 2 * np.pi}), torch.nn.Linear(4, 8), activation_module(act),
                              torch.nn.Linear(8, 8), activation_module(act), torch.nn.Linear(8, 1)).double()
    box = boxes(rng, system, 128)
    forms = forms_over(load_model(net), plant, box)
    lf, lg = sampled_lie(net, fG, samples_in(rng, box, 16))
    assert_holds(forms, lf, lg, rng, f"periodic {act}")


def test_the_float32_header_row_lies_above_the_bound_with_its_rounding():
    """Less sum_i e_i |F_i| (the float32 enclosure's gradient rounding bound, as the certifier
    subtracts it), the lower bound holds the compiled float32 header's gradient dotted with f + G u."""
    model, plant, box, u, e, psi32 = header_row_case()
    terms = plant_terms(plant, box, 1)
    F = terms.f + (terms.G * Interval.point(u)[:, None, :]).sum(-1)
    lower = forms_over(model, plant, box).lower(u) - np.sum(e * F.mag, axis=-1) * (1 + 2.0 ** -40)
    assert np.all(psi32 >= lower[None, :])
    assert np.mean(np.isfinite(lower)) > 0.5


def test_a_box_across_softplus_threshold_is_bounded_by_hulls_that_hold_both_sides():
    """Softplus' threshold is a value jump (x above it, log1p(e^x) below): no mean-value form
    holds across it, so a range straddling it is relaxed by the plain hulls of both sides.
    The forms still hold every sampled value, on both sides of the jump."""
    system = get_system("van_der_pol")
    plant, fG = plant_enclosure(system), reference_plant(system)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 1), torch.nn.Softplus(beta=1.0, threshold=2.0),
                              torch.nn.Linear(1, 1), torch.nn.Softplus(), torch.nn.Linear(1, 1)).double()
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1.0, 0.0]]))
        net[0].bias.zero_()
        net[2].weight.fill_(4.0)                       # the jump moves the next layer by 0.5
    box = Interval(np.array([[1.5, 0.0], [1.99, -0.1], [-1.0, 0.0]]), np.array([[2.5, 0.1], [2.01, 0.1], [-0.5, 0.1]]))
    rng = np.random.default_rng(1)
    forms = forms_over(load_model(net), plant, box)
    x = samples_in(rng, box, 4000)
    lf, lg = sampled_lie(net, fG, x)
    assert_holds(forms, lf, lg, rng, "across the threshold")
    assert np.all(np.isfinite(forms.lower(np.ones((3, 1)))))


def test_the_forms_lose_a_small_part_of_what_the_interval_product_loses_on_the_dubins_edge():
    """Why they exist: on boxes 0.05-0.1 wide at the shipped Dubins barrier's edge, the row's
    least sampled value less its lower bound is several times smaller for the forms than for
    the interval product grad h(B) . (f + G u)(B) the certifier starts from."""
    from compiler.reference import lie, value
    from training.certify.build import build_problem
    problem = build_problem("experiments/models/dubins.onnx", "experiments/models/dubins.json")
    rng = np.random.default_rng(0)
    pts = rng.uniform(problem.lo, problem.hi, (20000, 3))
    near = pts[np.abs(value(problem.model, pts)) < 0.02][:200]
    assert len(near) > 50
    box = Interval(near - np.array([0.055, 0.0275, 0.025]), near + np.array([0.055, 0.0275, 0.025]))
    u = np.full((len(near), 1), 2.0)
    forms = forms_over(problem.model, problem.plant, box).lower(u)
    terms = plant_terms(problem.plant, box, 1)
    product = (enclose(problem.model, box, order=1).grad * (terms.f + terms.G[..., 0] * 2.0)).sum(-1).lo
    x = samples_in(rng, box, 64).reshape(-1, 3)
    th = x[:, 2]
    G = np.zeros((len(x), 3, 1))
    G[:, 2, 0] = 1.0
    _, lf, lg = lie(problem.model, x, np.stack([np.cos(th), np.sin(th), 0 * th], 1), G)
    least = (lf + 2.0 * lg[:, 0]).reshape(64, -1).min(axis=0)
    centred = centred_row(problem.model, problem.plant, box, u, None).lower
    assert np.all(forms <= least)
    assert np.median(least - forms) < 0.3 * np.median(least - product), (np.median(least - forms), np.median(least - product))
    assert np.median(least - forms) < 0.5 * np.median(least - centred), (np.median(least - forms), np.median(least - centred))


def _boxes_on_zero_level(rng, net, system, count: int) -> Interval:
    """Boxes centred on {h = 0}: random states moved there by float64 Newton steps (torch); the
    output bias is shifted first so that h changes sign over the domain."""
    lo, hi = (np.asarray(v, float) for v in system.domain)
    x = rng.uniform(lo, hi, (count, system.n))
    with torch.no_grad():
        net[-1].bias -= float(np.median(net(torch.tensor(x))[:, 0].numpy()))
    for _ in range(40):
        with torch.no_grad():
            h = net(torch.tensor(x))[:, 0].numpy()
        g = torch_grad(net, x)
        x = x - (h / np.maximum(np.sum(g * g, axis=1), 1e-300))[:, None] * g
    with torch.no_grad():
        on = np.abs(net(torch.tensor(x))[:, 0].numpy()) < 1e-9
    assert on.sum() >= count // 4, on.sum()
    x = x[on]
    width = 10.0 ** rng.uniform(-3, -0.5, x.shape)
    return Interval(x - width / 2, x + width / 2)


@pytest.mark.parametrize("act", ["softplus", "tanh", "sigmoid", "gelu", "silu"])
@pytest.mark.parametrize("name", SYSTEMS)
def test_the_row_traded_against_h_lies_below_every_sampled_row_in_its_band(act, name):
    """lower_with_level(u, gain, h_lo, h_hi) holds L_f h + L_G h . u + gain h at every sampled state
    of the box whose h lies in [h_lo, h_hi] (torch float64 h and grad h, numpy f and G): the
    boundary condition's band |h| <= e (gain 0), e a third of h's spread over the box so that
    the multiplier's price is needed, and the set's band h >= 0 with gain 2.  And it pays: above
    the plain bound low(row) + gain h_lo on most boxes."""
    rng = np.random.default_rng(700 + 10 * ACTIVATION_NAMES.index(act) + SYSTEMS.index(name))
    system = get_system(name)
    plant, fG = plant_enclosure(system), reference_plant(system)
    net = random_net(act, system.n, 2, seed=3, gain=2.0)
    box = _boxes_on_zero_level(rng, net, system, 64)
    x = samples_in(rng, box, 400)
    S, B, n = x.shape
    with torch.no_grad():
        h = net(torch.tensor(x.reshape(-1, n)))[:, 0].numpy().reshape(S, B)
    err = (h.max(axis=0) - h.min(axis=0)) / 3
    lf, lg = sampled_lie(net, fG, x)
    forms = forms_over(load_model(net), plant, box)
    for gain, h_lo, h_hi in ((0.0, -err, err), (2.0, np.zeros(B), h.max(axis=0))):
        band = (h >= h_lo) & (h <= h_hi)
        assert band.sum(axis=0).min() > 20
        better = 0
        for trial in range(3):
            u = rng.uniform(-2, 2, (B, system.m))
            row = lf + np.einsum("sbm,bm->sb", lg, u) + gain * h
            bound, slope = forms.lower_with_level(u, gain, h_lo, h_hi)
            below = band & (row < bound[None, :] - TOL * (1.0 + np.abs(row)))
            assert not below.any(), f"{act}/{name}/gain {gain}: row {row[below][0]!r} below the bound in the band"
            assert slope.shape == (B, n) and np.all(slope >= 0)
            better += np.sum(bound > forms.lower(u) + gain * h_lo + 1e-9)
        assert better > 3 * B / 2, (gain, better)
