"""Bounds restricted to a ReLU piece's own region (training/certify/region_dual.py,
training/certify/piece_containment.py, compiler.bounds_pieces' cuts).

References: torch float64 forward passes for the activation pattern at sampled states; scipy's
LP (HiGHS) for the exact minimum over a piece's region of the slab; the plant's numpy constraint
at sampled states.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from scipy.optimize import linprog  # noqa: E402

from compiler.bounds_pieces import pieces  # noqa: E402
from compiler.frontend_torch import load_torch  # noqa: E402
from compiler.interval import Interval  # noqa: E402
from compiler.passes import canonicalize  # noqa: E402
from systems import SYSTEM_NAMES, get_system  # noqa: E402
from training.certify import region_dual  # noqa: E402
from training.certify.containment import traded_containment  # noqa: E402
from training.certify.piece_containment import _constraint_rows, piece_containment  # noqa: E402
from training.certify.problem import plant_enclosure  # noqa: E402

from test_bounds import samples_in  # noqa: E402
from test_containment_traded import _rim_boxes  # noqa: E402
from test_level_pieces import _net  # noqa: E402


def _patterns(net, x: np.ndarray) -> np.ndarray:
    """(K, hidden) active neurons (z > 0) at states x, torch float64."""
    bits, y = [], torch.tensor(x, dtype=torch.float64)
    with torch.no_grad():
        for layer in net:
            y = layer(y)
            if isinstance(layer, torch.nn.Linear) and layer is not net[-1]:
                bits.append((y > 0).numpy())
    return np.concatenate(bits, axis=1)


def _boxes(rng, n: int, count: int, width: float) -> Interval:
    centre = rng.uniform(-1, 1, (count, n))
    half = width * rng.uniform(0.3, 0.5, (count, n))
    return Interval(centre - half, centre + half)


@pytest.mark.parametrize("widths", [(3, 10, 1), (3, 8, 6, 1), (6, 8, 8, 8, 1)])
def test_a_sampled_state_meets_the_cuts_of_the_piece_whose_pattern_it_takes_and_no_others(widths):
    net = _net(1, widths).double()
    n = widths[0]
    rng = np.random.default_rng(2)
    box = _boxes(rng, n, 40, 0.6)
    found = pieces(canonicalize(load_torch(net, input_dim=n)), box, max_unstable=10, cuts=True)
    assert found.enumerated.mean() > 0.5 and found.branched.any()
    b = found.box_index
    xc = np.clip(box.mid, box.lo, box.hi)[b]
    a, rhs = region_dual.region_rows(found.cuts, xc, box.rad[b])
    active = (found.pattern == 1)
    x = samples_in(rng, box, 60)                                          # (S, B, n)
    checked = 0
    for k in np.flatnonzero(found.enumerated):
        mine = np.flatnonzero(b == k)
        for state, pattern in zip(x[:, k], _patterns(net, x[:, k])):
            match = mine[np.all(active[mine] == pattern, axis=1)]
            assert len(match) == 1, f"box {k}: {len(match)} pieces take the pattern of {state}"
            slack = np.einsum("pki,pi->pk", a[mine], state - xc[mine]) + rhs[mine]
            assert np.all(slack[mine == match[0]] >= -1e-12), (k, slack.min())
            # and every other piece of the box has a cut the state breaks: the first neuron where
            # the patterns differ has the same pre-activation in both, of the other sign
            assert np.all(slack[mine != match[0]].min(axis=1) < 0)
            checked += 1
    assert checked > 1000


def _lp_min(s, g, h_c, eps, a, rhs, r) -> float | None:
    """min s . d over a . d + b >= 0, |h_c + g . d| <= eps, |d| <= r (None: infeasible)."""
    res = linprog(s, A_ub=np.vstack([-a, g[None], -g[None]]), b_ub=np.r_[rhs, eps - h_c, eps + h_c],
                  bounds=list(zip(-r, r)), method="highs")
    return res.fun if res.status == 0 else None


def _pieces_on_level(seed: int, widths, count: int = 40):
    """The pieces of boxes around {h = 0} of a random network, with a random row slope s each."""
    net = _net(seed, widths).double()
    n = widths[0]
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (4000, n))
    with torch.no_grad():
        net[-1].bias -= float(np.median(net(torch.tensor(x))[:, 0].numpy()))
    box = _boxes(rng, n, count, 0.8)
    found = pieces(canonicalize(load_torch(net, input_dim=n)), box, max_unstable=10, cuts=True)
    b = found.box_index
    xc, r = np.clip(box.mid, box.lo, box.hi)[b], box.rad[b]
    a, rhs = region_dual.region_rows(found.cuts, xc, r)
    h_c = np.einsum("pi,pi->p", found.g, xc) + found.c
    s = rng.normal(size=found.g.shape)
    return s, found.g, h_c, np.full(len(b), 0.05), a, rhs, r, rng


@pytest.mark.parametrize("widths", [(3, 10, 1), (4, 8, 6, 1)])
def test_the_dual_value_at_any_multipliers_is_below_the_lp_minimum(widths):
    """Weak duality, evaluated with float64's rounding on the safe side: at random multipliers,
    at the ascent's, and with the cuts ignored (mu = 0), D never exceeds scipy's exact minimum."""
    s, g, h_c, eps, a, rhs, r, rng = _pieces_on_level(3, widths)
    P, K = rhs.shape
    args = (s, g, h_c, eps, a, rhs, r)
    climbed = region_dual.value(region_dual.ascend(*args, np.zeros(P)), *args)
    slab_only = region_dual.value(region_dual.ascend(*args, np.zeros(P), sweeps=0), *args)
    tries = [region_dual.value(np.c_[rng.normal(size=(P, 1)) * 3, rng.exponential(size=(P, K))], *args)
             for _ in range(5)]
    feasible = 0
    for p in range(min(P, 1500)):
        exact = _lp_min(*(v[p] for v in args))
        if exact is None:
            continue
        feasible += 1
        for bound in [climbed[p], slab_only[p]] + [t[p] for t in tries]:
            assert bound <= exact + 1e-9 * (1 + abs(exact)), (p, bound, exact)
    assert feasible > 50


def test_the_ascent_raises_the_slab_bound_and_often_reaches_the_lp_minimum():
    """Coordinate ascent stops short of the LP at kinks where several of D's terms break at once:
    on these random pieces (random row slopes) it reaches scipy's minimum on about 40% and raises
    the slab-only bound on more; on the spacecraft student's failing containment boxes it proved
    93% against the LP's 97% (region_dual.py), so the LP is not run in the search."""
    s, g, h_c, eps, a, rhs, r, _ = _pieces_on_level(4, (3, 10, 1), count=60)
    args = (s, g, h_c, eps, a, rhs, r)
    lam0 = np.zeros(len(s))
    climbed = region_dual.value(region_dual.ascend(*args, lam0), *args)
    slab_only = region_dual.value(region_dual.ascend(*args, lam0, sweeps=0), *args)
    close = raised = total = 0
    for p in range(min(len(s), 1500)):
        exact = _lp_min(*(v[p] for v in args))
        if exact is None:
            continue
        total += 1
        close += climbed[p] >= exact - 1e-6 * (1 + abs(exact))
        raised += climbed[p] > slab_only[p] + 1e-6 * (1 + abs(exact))
    assert total > 50
    assert close >= 0.3 * total, (close, total)
    assert raised >= 0.3 * total, (raised, total)


def test_a_direction_of_unbounded_growth_proves_the_piece_empty():
    """A cut no state of the box meets (x1 >= 1.5 on |x1| <= 1): the ascent sets its multiplier FAR
    and the bound comes out far above any value of s . d on the box."""
    a = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    rhs = np.array([[-1.5, 0.5]])
    args = (np.array([[1.0, -2.0]]), np.zeros((1, 2)), np.zeros(1), np.zeros(1), a, rhs, np.ones((1, 2)))
    y = region_dual.ascend(*args, np.zeros(1))
    assert region_dual.value(y, *args)[0] > 1e6
    assert _lp_min(*(v[0] for v in args)) is None


def test_emptiness_that_only_a_combination_of_cuts_shows_is_found_from_the_even_start():
    """x1 >= 0.5 and x1 <= -0.5: each cut alone leaves states, so the ascent from mu = 0 stays
    finite; ``emptiness`` (from every cut weighted alike) proves the piece empty, and ``raised``
    uses it where the ascent falls short of what is asked."""
    a = np.array([[[1.0, 0.0], [-1.0, 0.0]]])
    rhs = np.array([[-0.5, -0.5]])
    args = (np.array([[1.0, -2.0]]), np.zeros((1, 2)), np.zeros(1), np.zeros(1), a, rhs, np.ones((1, 2)))
    assert _lp_min(*(v[0] for v in args)) is None
    assert region_dual.value(region_dual.ascend(*args, np.zeros(1)), *args)[0] < 0
    assert region_dual.value(region_dual.emptiness(*args[1:]), *args)[0] > 1e6
    assert region_dual.raised(*args, np.zeros(1), np.zeros(1))[0] > 1e6


@pytest.mark.parametrize("name", SYSTEM_NAMES)
def test_the_constraint_rows_hold_at_every_sampled_state_where_the_constraint_fails(name):
    """The mean-value row and the tangent rows (second-order form about Newton points, the
    Hessian's enclosure over the hull) against the plant's numpy constraint, on boxes across
    {c = 0}: convex (balls), concave (the pendulum's band), indefinite (the Dubins annulus)."""
    system = get_system(name)
    plant = plant_enclosure(system)
    if plant.constraint_grad is None:
        pytest.skip("no gradient enclosure")
    rng = np.random.default_rng(5)
    lo, hi = (np.asarray(v, float) for v in system.domain)
    x = rng.uniform(lo, hi, (3000, system.n))
    for _ in range(20):                                   # Newton steps onto {c = 0}, finite differences
        c = np.asarray(system.constraint(x), float)
        step = 1e-7 * (hi - lo)
        grad = np.stack([(np.asarray(system.constraint(x + np.eye(system.n)[i] * step[i]), float) - c) / step[i]
                         for i in range(system.n)], axis=1)
        x = x - (c / np.maximum(np.einsum("bi,bi->b", grad, grad), 1e-12))[:, None] * grad
    c = np.asarray(system.constraint(x), float)
    centre = x[np.argsort(np.abs(c))[:300]]
    width = (hi - lo) * 10.0 ** rng.uniform(-2, -0.5, (300, system.n))
    box = Interval(centre - width / 2, centre + width / 2)
    a, rhs = _constraint_rows(SimpleNamespace(plant=plant), box)
    assert a.shape[1] == (3 if plant.constraint_hess is not None else 1)
    x = samples_in(rng, box, 200)
    S, B, n = x.shape
    c = np.asarray(system.constraint(x.reshape(-1, n)), float).reshape(S, B)
    xc = np.clip(box.mid, box.lo, box.hi)
    slack = np.einsum("bki,sbi->sbk", a, x - xc[None]) + rhs[None]
    fails = c < 0
    assert fails.sum() > 100, "too few sampled states fail the constraint"
    bad = fails[:, :, None] & (slack < -1e-12 * (1 + np.abs(rhs[None])))
    assert not bad.any(), f"row {np.argwhere(bad)[0]} fails at c = {c[fails].min()}"


def _ring_barrier(k: int = 16, clearance: float = 0.02, dent: float = 0.0) -> torch.nn.Sequential:
    """h = (pi / k) sum_j relu(d_j . p) - rho - dent sum_(+-x, +-y) relu(+-p_i - 0.45) on the planar
    point robot: nearly |p| - rho, with rho set so h < 0 on the disk |p| <= 0.5 with the given
    clearance, less four dents near the rim (neurons of negative weight, which the back
    substitution's upper plane relaxes loosely)."""
    net = torch.nn.Sequential(torch.nn.Linear(4, k + 4), torch.nn.ReLU(), torch.nn.Linear(k + 4, 1)).double()
    with torch.no_grad():
        theta = torch.arange(k, dtype=torch.float64) * (2 * np.pi / k)
        net[0].weight.zero_()
        net[0].weight[:k] = torch.stack([torch.cos(theta), torch.sin(theta), 0 * theta, 0 * theta], 1)
        net[0].bias.zero_()
        for j, direction in enumerate([[1, 0], [-1, 0], [0, 1], [0, -1]]):
            net[0].weight[k + j, :2] = torch.tensor(direction, dtype=torch.float64)
            net[0].bias[k + j] = -0.45
        net[2].weight[0, :k] = np.pi / k
        net[2].weight[0, k:] = -dent
        net[2].bias.zero_()
        ang = torch.linspace(-np.pi, np.pi, 4001, dtype=torch.float64)
        rim = torch.stack([0.5 * torch.cos(ang), 0.5 * torch.sin(ang), 0 * ang, 0 * ang], 1)
        net[2].bias.fill_(-float(net(rim)[:, 0].max()) - clearance)
    return net


def _containment_problem(net):
    system = get_system("point_robot")
    model = load_torch(net.float(), input_dim=4)
    return system, SimpleNamespace(plant=plant_enclosure(system), model=model)


def test_piece_containment_holds_every_sampled_state_and_proves_more_than_the_upper_plane():
    """Where c < 0 in a proven box, h (torch float64 of the float32 network) stays below minus
    the score; on boxes across the rim whose outer part reaches h >= 0, the pieces prove far
    more boxes than the back substitution's upper plane traded against c."""
    net = _ring_barrier(dent=3.0)
    system, problem = _containment_problem(net)
    rng = np.random.default_rng(9)
    box = _rim_boxes(rng, system, 400, shift=(0.0, 0.05), widths=(-1.4, -0.9))
    score = piece_containment(problem, box)
    x = samples_in(rng, box, 300)
    S, B, n = x.shape
    with torch.no_grad():
        h = net.double()(torch.tensor(x.reshape(-1, n)))[:, 0].numpy().reshape(S, B)
    c = system.constraint(x.reshape(-1, n)).reshape(S, B)
    bad = (c < 0) & (h > -score[None, :])
    assert not bad.any()
    reaches_set = h.max(axis=0) >= 0
    plane = traded_containment(problem, box, None)
    assert reaches_set.sum() > 100
    assert np.mean(score[reaches_set] > 0) > 0.9                  # measured: 96%
    assert np.mean(plane[reaches_set] > 0) < 0.6                  # measured: 46%


def test_a_leak_inside_the_constraint_is_never_proven():
    """The same barrier with a bump: h >= 0 at p = (0.3, 0), inside the disk.  No box holding that
    state is proven, however small."""
    net = _ring_barrier()
    with torch.no_grad():                         # one more neuron: a spike of height 1 at p1 = 0.3
        first, last = net[0], net[2]
        k = first.out_features
        grown = torch.nn.Sequential(torch.nn.Linear(4, k + 3), torch.nn.ReLU(), torch.nn.Linear(k + 3, 1)).double()
        grown[0].weight[:k], grown[0].bias[:k] = first.weight, first.bias
        grown[2].weight[:, :k], grown[2].bias[:] = last.weight, last.bias
        for j, (offset, gain) in enumerate([(-0.25, 20.0), (-0.3, -40.0), (-0.35, 20.0)]):
            grown[0].weight[k + j] = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
            grown[0].bias[k + j] = offset
            grown[2].weight[0, k + j] = gain
        leak = torch.tensor([[0.3, 0.0, 0.2, -0.1]], dtype=torch.float64)
        assert float(grown(leak)[0, 0]) > 0
    system, problem = _containment_problem(grown)
    rng = np.random.default_rng(3)
    width = 10.0 ** rng.uniform(-4, -1, (200, 4))
    box = Interval(leak.numpy() - width * rng.uniform(0.1, 0.9, (200, 4)), leak.numpy() + width)
    score = piece_containment(problem, box)
    assert np.all(score <= 0)
    assert np.isfinite(score).mean() > 0.9
