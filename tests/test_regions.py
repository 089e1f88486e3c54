"""The region walk along {h = 0} (training/certify/regions.py).

References: torch float64 autograd of the same float32 network, and scipy's LP built from it
(each pre-activation's and h's gradient at a state of the piece give the piece's polytope and
h's plane there), never the walk's own affine maps.  A planted violation only 2e-6 wide is
found by the walk and confirmed in torch float64; without it the same network is certified.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
from scipy.optimize import linprog  # noqa: E402

from compiler.frontend_torch import load_torch  # noqa: E402
from compiler.passes import canonicalize  # noqa: E402
from systems import get_system  # noqa: E402
from systems.base import ControlAffineSystem, Definition  # noqa: E402
from training.certify import certify_module, regions  # noqa: E402


@dataclass(frozen=True)
class _Params:
    drift: float = 0.5


class Sideways(ControlAffineSystem):
    """Carried along x at a constant speed, steered in y only (|u| <= 1); unsafe beyond y = 0.9."""
    name = "sideways"
    state_names = ("x", "y")
    input_names = ("u",)
    Params = _Params

    @staticmethod
    def define(x, p):
        return Definition(f=[p.drift, 0], G=[[0], [1]], constraint=0.9 - x[1], u_min=[-1], u_max=[1],
                          domain=([-1, -1], [1, 1]), nominal={"zero": [0]})


TENT_AT, TENT_WIDTH, TENT_SLOPE = 0.3, 1e-6, 4.0


def tent_barrier(slope: float) -> nn.Sequential:
    """h = 0.5 - y + slope * tent(x): tent(x) rises with slope 1 on [x0 - w, x0] and falls on
    [x0, x0 + w].  On the falling side the gradient is (-slope, -1), so sup_u hdot = -0.5 slope + 1
    < 0 there for slope 4; elsewhere sup_u hdot = 1.  The first neuron (0.5 - y + 10 > 0 on D) is
    always active."""
    net = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 1))
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[0.0, -1.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]))
        net[0].bias.copy_(torch.tensor([10.5, -TENT_AT + TENT_WIDTH, -TENT_AT, -TENT_AT - TENT_WIDTH]))
        net[2].weight.copy_(torch.tensor([[1.0, slope, -2 * slope, slope]]))
        net[2].bias.copy_(torch.tensor([-10.0]))
    return net.float().eval()


def _row64(net: nn.Sequential, system, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(h, sup_u grad h . (f + G u)) in torch float64 at states x (B, n)."""
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    h = net.double()(xt)[:, 0]
    (g,) = torch.autograd.grad(h.sum(), xt)
    g = g.numpy()
    gG = np.einsum("bi,bij->bj", g, system.G(x))
    best = np.maximum(gG * system.u_min, gG * system.u_max).sum(-1)
    return h.detach().numpy(), np.einsum("bi,bi->b", g, system.f(x)) + best


def _problem(net: nn.Sequential, system, lo=None, hi=None) -> SimpleNamespace:
    d_lo, d_hi = system.domain
    return SimpleNamespace(model=canonicalize(load_torch(net)), system=system, condition="boundary", order=1,
                           lo=np.asarray(d_lo if lo is None else lo, float), hi=np.asarray(d_hi if hi is None else hi, float),
                           u_lo=system.u_min, u_hi=system.u_max)


def test_linear_plants_are_recognised_from_their_sympy_definition():
    s = get_system("spacecraft")
    plant = regions.linear_plant(s)
    x = np.random.default_rng(0).uniform(-1, 1, (5, 6))
    assert np.allclose(x @ plant.A.T + plant.f0, s.f(x), atol=1e-15)
    assert np.array_equal(np.broadcast_to(plant.G, (5, 6, 3)), s.G(x))
    assert regions.linear_plant(get_system("obstacle_avoidance")) is None       # v sin(psi): not affine
    assert regions.linear_plant(get_system("hi_ord8")).G.shape == (8, 0)        # autonomous
    assert not regions.applies(_problem(nn.Sequential(nn.Linear(6, 4), nn.Softplus(), nn.Linear(4, 1)), s))


def _random_net(seed: int, widths: tuple[int, ...], system) -> nn.Sequential:
    """A random ReLU network whose zero level crosses the middle of the domain."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    net = nn.Sequential(*layers[:-1]).float().eval()
    lo, hi = system.domain
    x = np.random.default_rng(seed).uniform(lo, hi, (4000, len(lo)))
    with torch.no_grad():
        net[-1].bias -= float(np.median(net.double()(torch.tensor(x))[:, 0].numpy()))
    return net.float()


def _on_zero_level(net, rng, lo, hi, pairs: int) -> np.ndarray:
    """States on {h = 0} (|h| < 1e-12) by bisection between sampled states of opposite sign."""
    a, b = rng.uniform(lo, hi, (pairs, len(lo))), rng.uniform(lo, hi, (pairs, len(lo)))
    h = lambda x: net.double()(torch.tensor(x))[:, 0].detach().numpy()           # noqa: E731
    keep = np.sign(h(a)) != np.sign(h(b))
    a, b = a[keep], b[keep]
    for _ in range(90):
        m = 0.5 * (a + b)
        same = np.sign(h(m)) == np.sign(h(a))
        a, b = np.where(same[:, None], m, a), np.where(same[:, None], b, m)
    return 0.5 * (a + b)


def _reference_piece_min(net, system, x: np.ndarray, lo, hi) -> tuple[np.ndarray, float]:
    """(pattern, min of the row over x's piece) by scipy's LP built from torch autograd at x: the
    pre-activations' gradients and values there give the piece's polytope, h's give its plane."""
    xt = torch.tensor(x[None], dtype=torch.float64, requires_grad=True)
    pre, y = [], xt
    for layer in net.double():
        y = layer(y)
        if isinstance(layer, nn.Linear):
            pre.append(y)
    Z = torch.cat([torch.autograd.functional.jacobian(lambda v, k=k: _upto(net, v, k), xt)[0, :, 0, :]
                   for k in range(len(pre) - 1)]).numpy()
    z = torch.cat([p[0] for p in pre[:-1]]).detach().numpy()
    pattern = z > 0
    g = torch.autograd.grad(pre[-1].sum(), xt)[0][0].numpy()
    z0, c = z - Z @ x, float(pre[-1][0, 0].detach()) - g @ x
    sign = np.where(pattern, 1.0, -1.0)
    plant = regions.linear_plant(system)
    gG = g @ plant.G
    res = linprog(g @ plant.A, A_ub=-sign[:, None] * Z, b_ub=sign * z0, A_eq=g[None], b_eq=[-c],
                  bounds=list(zip(lo, hi)), method="highs")
    assert res.status == 0
    return pattern, res.fun + g @ plant.f0 + np.maximum(gG * system.u_min, gG * system.u_max).sum()


def _upto(net, x, k):
    """The k-th hidden layer's pre-activations of the float64 network."""
    linear = 0
    for layer in net:
        x = layer(x)
        if isinstance(layer, nn.Linear):
            if linear == k:
                return x
            linear += 1
    raise IndexError(k)


@pytest.mark.parametrize("seed", [0, 1])
def test_every_sampled_piece_is_walked_with_the_exact_minimum_of_its_row(seed):
    """The walk from one sample's patterns reaches the pieces of an independent sample, and on
    each its minimum equals scipy's over the polytope torch's gradients give, and lies below
    every sampled row of the piece."""
    s = get_system("spacecraft")
    net = _random_net(seed, (6, 8, 8, 1), s)
    lo, hi = s.domain
    p = _problem(net, s)
    seeds = _on_zero_level(net, np.random.default_rng(100 + seed), lo, hi, 400)
    w = regions.walk(p, seeds, deadline=float("inf"), stop_at_negative=10 ** 9)
    assert w.exhausted and w.pieces == len(w.values) > 20
    x = _on_zero_level(net, np.random.default_rng(200 + seed), lo, hi, 400)
    _, rows = _row64(net, s, x)
    checked = 0
    for k in range(0, len(x), max(1, len(x) // 40)):
        pattern, reference = _reference_piece_min(net, s, x[k], lo, hi)
        key = pattern.tobytes()
        assert key in w.values, "a sampled piece was not reached"
        assert w.values[key] == pytest.approx(reference, abs=1e-7)
        assert rows[k] >= w.values[key] - 1e-9
        checked += 1
    assert checked >= 30
    negatives = sorted(p.value for p in w.negative)
    assert negatives == sorted(v for v in w.values.values() if v < 0)


def _no_ridges(problem, x, owner, per_state=2):
    return x[:0], owner[:0]


def test_a_violation_two_millionths_wide_is_found_and_confirmed(monkeypatch):
    from training.certify import falsify
    monkeypatch.setattr(falsify, "to_ridge", _no_ridges)            # the walk's find, not the ridges' (below)
    s = Sideways()
    net = tent_barrier(TENT_SLOPE)
    cert = certify_module(net, s, condition="boundary", scope="in-domain", time_limit=60)
    assert not cert.certified and cert.boxes["evaluated"] == 0, cert.summary()     # by the falsifier, before any box
    assert cert.region_walk["violations"] >= 1 and cert.region_walk["least_row"] == pytest.approx(1 - 0.5 * TENT_SLOPE)
    found = cert.conditions["feasibility"].counterexamples
    for c in found:
        x = np.array(c["x"])
        h, row = _row64(net, s, x[None])
        assert abs(h[0]) < 1e-6 and row[0] == pytest.approx(1 - 0.5 * TENT_SLOPE, abs=1e-4)
        assert TENT_AT <= x[0] <= TENT_AT + TENT_WIDTH              # on the tent's falling side
        assert c["value"] == pytest.approx(row[0], abs=1e-6)


def test_without_the_walk_and_the_ridges_the_falsifier_misses_it_and_without_the_tent_it_is_certified(monkeypatch):
    from training.certify import falsify
    s = Sideways()
    net = tent_barrier(TENT_SLOPE)
    p = _problem(net, s)
    seeds = _on_zero_level(net, np.random.default_rng(0), *s.domain, 2000)
    walked = regions.walk(p, seeds, deadline=float("inf"))
    assert walked.exhausted and [round(q.value, 6) for q in walked.negative] == [1 - 0.5 * TENT_SLOPE]
    monkeypatch.setattr(falsify.regions, "applies", lambda problem: False)
    from training.certify.build import build_problem
    problem = build_problem(load_torch(net), None, system=s, condition="boundary", scope="in-domain")
    # the states moved onto the tent's ridges meet its falling side: torch float64's rows just
    # beside each counterexample (one on each side of the ridge) fall to the falling side's
    by_ridges = falsify.falsify(problem, 0.0, deadline=float("inf")).items["feasibility"]
    assert by_ridges
    for x, value, _ in by_ridges:
        _, rows = _row64(net, s, x + np.array([[-1e-8, 0], [1e-8, 0]]))
        assert value == pytest.approx(1 - 0.5 * TENT_SLOPE, abs=1e-9) and rows.min() == pytest.approx(value, abs=1e-9)
    monkeypatch.setattr(falsify, "to_ridge", _no_ridges)
    assert not falsify.falsify(problem, 0.0, deadline=float("inf"))       # the sampled states miss 2e-6
    monkeypatch.undo()
    flat = certify_module(tent_barrier(0.0), s, condition="boundary", scope="in-domain", time_limit=60)
    assert flat.certified, flat.summary()
    assert flat.region_walk["exhausted"] and flat.region_walk["violations"] == 0
    assert flat.region_walk["least_row"] == pytest.approx(1.0)
    clean = regions.walk(_problem(tent_barrier(0.0), s), seeds, deadline=float("inf"))
    assert clean.exhausted and not clean.negative and min(clean.values.values()) == pytest.approx(1.0)


def test_the_distillation_oracle_returns_a_state_inside_each_piece_below_the_slack():
    """``training.distil.walked_failures``: on the tent barrier, slack 0 gives the falling side
    (a state strictly inside it, where torch float64's row is the piece's), slack 1.5 the falling
    side and the two flat pieces (row 1), not the rising side (row 1 + 0.5 slope = 3); a Softplus
    student gives none."""
    from training.distil import walked_failures
    s = Sideways()
    lo, hi = (np.asarray(v, float) for v in s.domain)
    x, record = walked_failures(tent_barrier(TENT_SLOPE), s, lo, hi, 30.0, 0.0)
    assert record["walk_violations"] == len(x) == 1
    h, row = _row64(tent_barrier(TENT_SLOPE), s, x)
    assert TENT_AT < x[0, 0] < TENT_AT + TENT_WIDTH and abs(h[0]) < 1e-9
    assert row[0] == pytest.approx(1 - 0.5 * TENT_SLOPE, abs=1e-9)
    x, record = walked_failures(tent_barrier(TENT_SLOPE), s, lo, hi, 30.0, 1.5)
    assert record["walk_pieces"] == 4 and record["walk_below_slack"] == len(x) == 3 and record["walk_violations"] == 1
    smooth = nn.Sequential(nn.Linear(2, 4), nn.Softplus(), nn.Linear(4, 1))
    x, record = walked_failures(smooth, s, lo, hi, 30.0, 0.0)
    assert x.shape == (0, 2) and record == {}
