"""compiler/bounds_linear.py: the linear relaxation (CROWN-style back substitution) of h over
a box holds torch float64 h at sampled states for random networks of every activation and with
a periodic (sin/cos) embedding, holds the float32 header's h with its rounding bound, and is
tighter than the interval enclosure on wide boxes of deeper networks.

The Lie row's own bounds (linear forms of L_f h and L_G h) are tested in test_lie_forms.py.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from compiler.api import load_model
from compiler.bounds import enclose
from compiler.bounds_linear import linear_bounds
from compiler.interval import Interval

from test_bounds import assert_contains, random_boxes, random_net, samples_in, torch_jets
from training.architectures import ACTIVATION_NAMES, activation_module

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
