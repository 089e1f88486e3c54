"""The boundary row of a ReLU network on {h = 0}, piece by piece (training/certify/level_pieces.py).

References: torch float64 autograd of the same float32 network (ReLU'(0) = 0) at states on
{h = 0} found by bisection inside each box, with the plant's own float64 f and G there; and
scipy's LP (HiGHS) for the exact minimum of a linear plant's row over a box's slice of {h = 0}.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from scipy.optimize import linprog  # noqa: E402

from compiler.bounds_pieces import pieces  # noqa: E402
from compiler.frontend_torch import load_torch  # noqa: E402
from compiler.interval import Interval  # noqa: E402
from compiler.passes import canonicalize  # noqa: E402
from systems import get_system  # noqa: E402
from training.certify.level_pieces import level_piece_row  # noqa: E402
from training.certify.level_pieces import MAX_UNSTABLE  # noqa: E402
from training.certify.patterns import preactivation_enclosures, supported  # noqa: E402
from training.certify.problem import plant_enclosure  # noqa: E402
from training.certify.terms import plant_terms  # noqa: E402

PLANTS = {"obstacle_avoidance": (3, 2.0), "spacecraft": (6, 1.0)}      # n, input bound


def _net(seed: int, widths, span: float = 1.5) -> torch.nn.Sequential:
    """A random ReLU network whose zero level crosses the middle of [-span, span]^n (its last
    bias moves h's median there to 0)."""
    torch.manual_seed(seed)
    layers = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers[:-1]).float().eval()
    x = np.random.default_rng(seed).uniform(-span, span, (2000, widths[0]))
    with torch.no_grad():
        net[-1].bias -= float(np.median(_h(net, x)))
    return net.float()


def _h(net, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return net.double()(torch.tensor(x, dtype=torch.float64))[:, 0].numpy()


def _grad(net, x: np.ndarray) -> np.ndarray:
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    net.double()(xt)[:, 0].sum().backward()
    return xt.grad.numpy()


def _zero_level(net, rng, lo: np.ndarray, hi: np.ndarray, pairs: int = 300) -> np.ndarray:
    """States of the box on {h = 0} (|h| < 1e-12): bisection between sampled states of opposite sign."""
    a, b = rng.uniform(lo, hi, (pairs, len(lo))), rng.uniform(lo, hi, (pairs, len(lo)))
    ha, hb = _h(net, a), _h(net, b)
    keep = np.sign(ha) * np.sign(hb) < 0
    a, b, ha = a[keep], b[keep], ha[keep]
    for _ in range(80):
        m = 0.5 * (a + b)
        hm = _h(net, m)
        same = np.sign(hm) == np.sign(ha)
        a, ha, b = np.where(same[:, None], m, a), np.where(same, hm, ha), np.where(same[:, None], b, m)
    return a[np.abs(_h(net, a)) < 1e-12]


def _boxes_on_level(net, rng, n: int, span: float, width: float, count: int) -> Interval:
    """Boxes of the given width centred on states of {h = 0} of the domain [-span, span]^n."""
    x = _zero_level(net, rng, np.full(n, -span), np.full(n, span), pairs=4000)[:count]
    return Interval(x - width * rng.uniform(0.3, 0.5, x.shape), x + width * rng.uniform(0.3, 0.5, x.shape))


def _row_bound(model, system, box: Interval, u_max: float) -> np.ndarray:
    plant = plant_enclosure(system)
    terms = plant_terms(plant, box, 1, with_input_jacobian=True)
    centre = plant_terms(plant, Interval.point(box.mid), 1)
    return level_piece_row(model, box, centre, terms, np.full(system.m, -u_max), np.full(system.m, u_max))


@pytest.mark.parametrize("name", sorted(PLANTS))
@pytest.mark.parametrize("seed", range(2))
def test_the_bound_is_below_the_row_at_every_state_of_the_zero_level_in_the_box(name, seed):
    """sup_u grad h . (f + G u) at states on {h = 0} inside each box, torch float64 gradients."""
    n, u_max = PLANTS[name]
    system = get_system(name)
    net = _net(seed, (n, 12, 8, 1))
    model = load_torch(net, input_dim=n)
    rng = np.random.default_rng(seed)
    box = _boxes_on_level(net, rng, n, 1.5, 0.3, 60)
    bound = _row_bound(model, system, box, u_max)
    decided = np.flatnonzero(np.isfinite(bound))
    assert len(decided) >= 20
    checked = 0
    for b in decided:
        x = _zero_level(net, rng, box.lo[b], box.hi[b])
        if not len(x):
            continue
        grad = _grad(net, x)
        rate = np.einsum("bi,bi->b", grad, system.f(x)) + u_max * np.abs(np.einsum("bi,bij->bj", grad, system.G(x))).sum(1)
        assert bound[b] <= rate.min(), (b, bound[b], rate.min())
        checked += 1
    assert checked >= 15


def test_on_a_box_of_one_piece_a_linear_plants_bound_is_the_exact_minimum_over_the_zero_level():
    """Boxes where every neuron is stable (one affine piece): the bound equals scipy's LP minimum
    of g . (A x) + sup_u g . G u over {x in box, g . x + c = 0}, to 1e-9 (it may only lie below)."""
    system = get_system("spacecraft")
    net = _net(3, (6, 8, 6, 1))
    model = load_torch(net, input_dim=6)
    rng = np.random.default_rng(3)
    box = _boxes_on_level(net, rng, 6, 1.5, 0.2, 200)
    one = pieces(canonicalize(model), box, max_unstable=0)
    single = np.flatnonzero(one.enumerated)
    assert len(single) >= 20
    bound = _row_bound(model, system, box, 1.0)
    A = np.stack([system.f(np.eye(6)[i:i + 1])[0] - system.f(np.zeros((1, 6)))[0] for i in range(6)], axis=1)
    G = system.G(np.zeros((1, 6)))[0]
    below = 0
    for b in single:
        piece = np.flatnonzero(one.box_index == b)[0]
        g, c = one.g[piece], one.c[piece]
        bounds = list(zip(box.lo[b], box.hi[b]))
        lp = linprog(A.T @ g, A_eq=g[None], b_eq=[-c], bounds=bounds, method="highs")
        assert lp.status == 0
        exact = lp.fun + np.abs(g @ G).sum()
        assert bound[b] <= exact + 1e-12
        assert bound[b] >= exact - 1e-5 * (1 + abs(exact)), (b, bound[b], exact)
        whole_box = linprog(A.T @ g, bounds=bounds, method="highs").fun + np.abs(g @ G).sum()
        below += exact - whole_box > 100 * max(exact - bound[b], 1e-12)   # the slab recovers >= 99% of the gap
    assert below >= len(single) // 2


def _every_piece_over_the_whole_box(model, system, box: Interval, u_max: float) -> np.ndarray:
    """The bound without the zero level, in the common-input form: max over the vertices of U of
    the min over each box's pieces of lo(g . F_u(B)), F over the whole box (interval arithmetic)."""
    found = pieces(canonicalize(model), box, max_unstable=MAX_UNSTABLE)
    plant = plant_terms(plant_enclosure(system), box, 1)
    b = found.box_index
    out = np.full(box.shape[0], -np.inf)
    for k in range(2 ** system.m):
        u = np.where([(k >> j) & 1 for j in range(system.m)], u_max, -u_max)
        F = plant.f[b] + (plant.G[b] * Interval.point(np.tile(u, (len(b), 1)))[:, None, :]).sum(-1)
        least = np.full(box.shape[0], np.inf)
        np.minimum.at(least, b, (Interval.point(found.g) * F).sum(-1).lo)
        out = np.maximum(out, least)
    return np.where(found.enumerated, out, -np.inf)


def test_the_zero_level_proves_more_boxes_than_every_piece_over_the_whole_box():
    """On boxes centred on {h = 0} of a linear plant: strictly more boxes proven than with
    each piece's exact gradient against F over the whole box, one input for all of them (less the header's rounding, which
    that reference leaves out, the bound is never lower by more than 1e-5, unless it is >= 0: the
    common input stops at the first that proves the box)."""
    system = get_system("spacecraft")
    net = _net(5, (6, 12, 8, 1))
    model = load_torch(net, input_dim=6)
    box = _boxes_on_level(net, np.random.default_rng(5), 6, 1.5, 0.3, 150)
    new = _row_bound(model, system, box, 1.0)
    old = _every_piece_over_the_whole_box(model, system, box, 1.0)
    both = np.isfinite(old) & np.isfinite(new)
    assert both.sum() >= 50
    assert np.all((new[both] >= old[both] - 1e-5) | (new[both] >= 0))       # it stops at the first input that proves
    assert np.sum(new >= 0) > np.sum(old >= 0) + 10


def test_a_box_with_too_many_unstable_neurons_is_left_to_splitting_and_an_affine_barrier_has_one_piece():
    system = get_system("obstacle_avoidance")
    wide = load_torch(_net(0, (3, 32, 1)), input_dim=3)
    whole = Interval(np.full((1, 3), -2.0), np.full((1, 3), 2.0))
    assert MAX_UNSTABLE < 32 and _row_bound(wide, system, whole, 2.0)[0] == -np.inf
    affine = torch.nn.Sequential(torch.nn.Linear(3, 1)).float().eval()
    box = _boxes_on_level(affine, np.random.default_rng(1), 3, 1.5, 0.3, 20)
    bound = _row_bound(load_torch(affine, input_dim=3), system, box, 2.0)
    assert len(bound) >= 10 and np.all(np.isfinite(bound))


def test_only_dense_and_relu_networks_are_taken():
    lin = torch.nn.Linear
    assert supported(load_torch(_net(0, (3, 8, 6, 1)), input_dim=3))
    assert supported(load_torch(torch.nn.Sequential(lin(3, 1)), input_dim=3))
    softplus = torch.nn.Sequential(lin(3, 4), torch.nn.Softplus(), lin(4, 1))
    mixed = torch.nn.Sequential(lin(3, 4), torch.nn.ReLU(), lin(4, 4), torch.nn.Tanh(), lin(4, 1))
    assert not supported(load_torch(softplus, input_dim=3)) and not supported(load_torch(mixed, input_dim=3))


def test_clamping_by_the_enclosures_keeps_every_sampled_states_pattern():
    """pieces(widen=, clamp=) with the header's error and the interval/zonotope enclosures drops
    only patterns no state takes: each sampled state's (float64) pattern is still listed."""
    net = _net(7, (4, 10, 10, 1))
    model = canonicalize(load_torch(net, input_dim=4))
    rng = np.random.default_rng(7)
    lo = rng.uniform(-1.5, 1.0, (40, 4))
    box = Interval(lo, lo + rng.uniform(0.05, 0.5, (40, 4)))
    enclosures, errors, _ = preactivation_enclosures(model, box)
    found = pieces(model, box, 10, widen=errors, clamp=enclosures)
    plain = pieces(model, box, 10)
    assert found.enumerated.sum() >= 20
    assert len(found.box_index) < len(plain.box_index)          # the clamp does prune
    weights = [layer for layer in net if isinstance(layer, torch.nn.Linear)]
    for b in np.flatnonzero(found.enumerated):
        x = torch.tensor(rng.uniform(box.lo[b], box.hi[b], (200, 4)))
        signs = []
        for layer in weights[:-1]:
            x = layer.double()(x)
            signs.append((x > 0).numpy())
            x = torch.relu(x)
        pattern = np.concatenate(signs, axis=1).astype(np.int8)
        listed = found.pattern[found.box_index == b]
        assert all(np.any(np.all(listed == p, axis=1)) for p in pattern), b
