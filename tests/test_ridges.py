"""The boundary condition at a ReLU barrier's ridges: one input for every piece met there (Clarke).

The roof h = x2 + x1/2 - |x1 - a| under x1' = u (|u| <= 2), x2' = d meets {h = 0} on a ridge at
x1 = a.  Its two pieces have gradients (-1/2, 1) and (3/2, 1), and the reference's gradient on the
ridge itself (ReLU'(0) = 0) is (1/2, 1).  With d = -1/2 each of those has an input that makes
hdot >= 0 (1/2, 5/2 and 1/2), yet no one input serves both pieces (-u/2 - 1/2 >= 0 needs u <= -1,
3u/2 - 1/2 >= 0 needs u >= 1/3), and the set is not invariant: x2 falls at 1/2 whatever the input,
while h <= x2 + a/2 everywhere.  With d = 0.1, u = 0 serves both and the set is invariant.
"""
from __future__ import annotations

import shlex
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from conftest import cli_in_process, module_on_path  # noqa: E402

A, SLOPE = 0.1, 0.5

PLANT = textwrap.dedent('''
    from dataclasses import dataclass
    from systems.base import ControlAffineSystem, Definition


    @dataclass(frozen=True)
    class RoofParams:
        drift: float = -0.5
        push: float = 0.0


    class Roof(ControlAffineSystem):
        """x1' = push + u, x2' = drift: the roof h = x2 + x1/2 - |x1 - a| has a ridge on {h = 0}."""
        name = "roof"
        state_names = ("x1", "x2")
        input_names = ("u",)
        Params = RoofParams

        @staticmethod
        def define(x, p):
            return Definition(f=[p.push, p.drift], G=[[1], [0]], constraint=x[1] + 2,
                              u_min=[-2], u_max=[2], domain=([-1, -1], [1, 1]), nominal={"zero": [0]})
''')


@pytest.fixture(scope="module")
def roof_plant(tmp_path_factory):
    for _ in module_on_path(tmp_path_factory, "roof_plant", PLANT):
        import roof_plant
        yield roof_plant


def roof() -> nn.Sequential:
    """h = x2 + SLOPE x1 - |x1 - A| (the two linear terms through neurons that stay active on D)."""
    net = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 1))
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1.0, 0], [-1, 0], [1, 0], [0, 1]]))
        net[0].bias.copy_(torch.tensor([-A, A, 5.0, 5.0]))
        net[2].weight.copy_(torch.tensor([[-1.0, -1, SLOPE, 1]]))
        net[2].bias.fill_(-5.0 * SLOPE - 5.0)
    return net.float().eval()


def grad64(net: nn.Sequential, x: np.ndarray) -> np.ndarray:
    """torch float64 autograd gradient of the float32 network (float32 -> float64 is exact)."""
    xt = torch.tensor(np.atleast_2d(x), dtype=torch.float64, requires_grad=True)
    net.double()(xt).sum().backward()
    net.float()
    return xt.grad.numpy()


def ridge_point(net: nn.Sequential) -> np.ndarray:
    """The ridge's point on {h = 0}: x1 = the float32 bias' A, x2 = -SLOPE x1 (exact in float64)."""
    a = float(net[0].bias[1].item())
    return np.array([a, -SLOPE * a])


def test_the_roof_passes_every_single_gradient_check_and_is_not_invariant(roof_plant):
    """The premise, from torch and scipy alone: each gradient near the ridge has its own good input,
    and every closed loop from the ridge leaves {h >= 0} at once."""
    from scipy.integrate import solve_ivp
    net, x = roof(), ridge_point(roof())
    F = lambda u: np.array([u, -0.5])                                          # noqa: E731
    for g in grad64(net, np.stack([x, x + [1e-6, 0], x - [1e-6, 0]])):
        assert max(g @ F(-2.0), g @ F(2.0)) >= 0.5 - 1e-12                      # sup_u hdot >= 1/2 for each
    for u in np.linspace(-2, 2, 9):
        run = solve_ivp(lambda t, s: F(u), (0, 0.2), x, rtol=1e-10, atol=1e-12)
        with torch.no_grad():
            h = net.double()(torch.tensor(run.y[:, -1][None])).item()
        net.float()
        assert h < -0.09                                                        # h <= x2 + a/2 = -0.1 at t = 0.2


def test_the_roof_is_refused_with_a_counterexample_on_its_ridge_that_replays(roof_plant, tmp_path):
    from training.certify import certify_module
    net = roof()
    cert = certify_module(net, roof_plant.Roof(), condition="boundary", scope="in-domain", time_limit=60,
                          onnx_path=tmp_path / "roof.onnx")
    assert not cert.certified
    found = cert.conditions["feasibility"].counterexamples
    assert found, cert.summary()
    for c in found:
        p = np.array(c["x"])
        assert abs(p[0] - ridge_point(net)[0]) < 1e-8 and c["value"] == pytest.approx(-0.5, abs=1e-6)
    out = cli_in_process(shlex.split(found[0]["replay"])[1:])
    assert out.returncode == 3 and "feasibility  VIOLATED" in out.stdout, out.stdout + out.stderr
    assert "min over the pieces met" in out.stdout


def test_the_roof_with_a_common_input_is_certified(roof_plant):
    from training.certify import certify_module
    net = roof()
    cert = certify_module(net, roof_plant.Roof(roof_plant.RoofParams(drift=0.1)), condition="boundary",
                          scope="in-domain", time_limit=60)
    assert cert.certified, cert.summary()
    assert "one input serves every adjacent piece" in cert.claim
    x = ridge_point(net)                                                        # u = 0 serves both pieces
    for g in grad64(net, np.stack([x + [1e-6, 0], x - [1e-6, 0]])):
        assert g @ np.array([0.0, 0.1]) >= 0.1 - 1e-12


def test_a_common_input_inside_the_input_box_is_found(roof_plant):
    """push 1/2, drift 0.1: the pieces' rows -(u + 1/2)/2 + 0.1 and 3(u + 1/2)/2 + 0.1 are both >= 0
    only for u in [-0.567, -0.3], neither a vertex of [-2, 2] nor its centre: the LP's mixed input
    finds it (and u = -0.4 serves both pieces in torch float64 beside the ridge)."""
    from training.certify import certify_module
    net = roof()
    plant = roof_plant.Roof(roof_plant.RoofParams(drift=0.1, push=0.5))
    cert = certify_module(net, plant, condition="boundary", scope="in-domain", time_limit=60)
    assert cert.certified, cert.summary()
    x = ridge_point(net)
    for g in grad64(net, np.stack([x + [1e-6, 0], x - [1e-6, 0]])):
        assert g @ np.array([0.5 - 0.4, 0.1]) > 0


@pytest.mark.parametrize("half_width", [1e-2, 1e-4, 1e-7])
def test_no_box_holding_the_ridge_point_is_proven(roof_plant, half_width):
    """The box search's bounds (interval and level pieces together) must fail on every box around the
    ridge point, however small: each piece alone has an input, so a per-piece bound would pass."""
    from compiler.interval import Interval
    from training.certify.build import build_problem
    from training.certify.conditions import evaluate
    net = roof()
    problem = build_problem(net, None, system=roof_plant.Roof(), condition="boundary", margin=0.0, scope="in-domain")
    x = ridge_point(net)
    offsets = np.array([[0, 0], [0.3, -0.2], [-0.4, 0.1]]) * half_width        # the point inside, off-centre
    box = Interval(x - half_width + offsets, x + half_width + offsets)
    assert np.all(evaluate(problem, box, 0.0).scores["feasibility"] < 0)
    # with a common input the same boxes are proven
    good = build_problem(net, None, system=roof_plant.Roof(roof_plant.RoofParams(drift=0.1)), condition="boundary",
                         margin=0.0, scope="in-domain")
    assert np.all(evaluate(good, box, 0.0).scores["feasibility"] >= 0)


def test_common_input_value_against_a_grid():
    """The LP's dual value bounds max_u min_j (d_j + b_j . u) from above, and sits on it: a fine grid
    of inputs (2-D) is never above it and comes within the grid's reach."""
    from training.certify.ridges import common_input_value
    rng = np.random.default_rng(3)
    u_lo, u_hi = np.array([-1.0, -0.5]), np.array([2.0, 1.0])
    grid = np.stack(np.meshgrid(np.linspace(-1, 2, 601), np.linspace(-0.5, 1, 301)), -1).reshape(-1, 2)
    for _ in range(20):
        rows = rng.integers(2, 6)
        drift, gains = rng.normal(size=rows), rng.normal(size=(rows, 2))
        best = np.max(np.min(drift[:, None] + gains @ grid.T, axis=0))
        value = common_input_value(drift, gains, u_lo, u_hi)
        reach = np.abs(gains).sum(1).max() * 0.005
        assert best <= value + 1e-9 and value <= best + reach


def test_to_ridge_lands_on_the_level_set_and_a_neuron_zero_set(roof_plant):
    """torch float64 checks the landing points: h = 0 and the pre-activation x1 - a = 0 (to 1e-9)."""
    from training.certify.build import build_problem
    from training.certify.ridges import to_ridge
    net = roof()
    problem = build_problem(net, None, system=roof_plant.Roof(), condition="boundary", margin=0.0, scope="in-domain")
    x1 = np.linspace(-0.8, 0.8, 17)
    on = np.stack([x1, np.abs(x1 - A) - SLOPE * x1], 1)                         # states of {h = 0}
    y, owner = to_ridge(problem, on, np.arange(len(on)))
    assert len(y) >= len(on) and set(owner) == set(range(len(on)))
    with torch.no_grad():
        net.double()
        h = net(torch.tensor(y)).numpy()[:, 0]
        z = net[0](torch.tensor(y)).numpy()
        net.float()
    assert np.all(np.abs(h) <= 1e-9)
    assert np.all(np.abs(z[:, 0]) <= 1e-9)                                       # the roof's one ridge: x1 = a


def test_other_piecewise_linear_networks_are_left_to_the_interval_bound(roof_plant):
    """A leaky-ReLU roof is not a Dense/ReLU network: no ridge is searched, the rate is left as it
    is, and the search's interval bound still refuses every box around its ridge point."""
    from compiler.interval import Interval
    from training.certify.build import build_problem
    from training.certify.conditions import evaluate
    from training.certify.ridges import ridge_rate, to_ridge
    net = roof()
    leaky = nn.Sequential(net[0], nn.LeakyReLU(0.01), net[2]).float().eval()
    problem = build_problem(leaky, None, system=roof_plant.Roof(), condition="boundary", margin=0.0, scope="in-domain")
    assert problem.relu_like
    x = np.stack([ridge_point(net)] * 3)
    assert len(to_ridge(problem, x, np.arange(3))[0]) == 0
    assert np.array_equal(ridge_rate(problem, x, np.array([1.0, 2.0, 3.0])), [1.0, 2.0, 3.0])
    box = Interval(x[:1] - 1e-4, x[:1] + 1e-4)
    assert np.all(evaluate(problem, box, 0.0).scores["feasibility"] < 0)
