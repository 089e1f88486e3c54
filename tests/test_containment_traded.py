"""training/certify/containment.py: containment traded against the constraint (a Lagrangian
multiplier) holds every sampled state (torch float64 h, numpy constraint): where the
constraint fails in a box, h stays below minus the score; and it pays where the interval
check cannot: boxes across the obstacle's rim whose outer part lies in the set."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from compiler.api import load_model
from compiler.interval import Interval
from systems import get_system
from training.certify.containment import traded_containment
from training.certify.problem import plant_enclosure

from test_bounds import random_net, samples_in


def _rim_boxes(rng, system, count: int, shift=(-0.1, 0.1), widths=(-3.0, -0.7)) -> Interval:
    """Boxes centred at r + shift (a random offset in that range) from the obstacle's centre,
    of widths 10^(a random exponent in ``widths``)."""
    lo, hi = (np.asarray(v, float) for v in system.domain)
    x = rng.uniform(lo, hi, (count, system.n))
    ang = rng.uniform(-np.pi, np.pi, count)
    rim = system.params.radius + rng.uniform(*shift, count)
    x[:, 0], x[:, 1] = rim * np.cos(ang), rim * np.sin(ang)
    width = 10.0 ** rng.uniform(*widths, x.shape)
    return Interval(x - width / 2, x + width / 2)


def _assert_sound(net, system, box: Interval, rng) -> np.ndarray:
    problem = SimpleNamespace(plant=plant_enclosure(system), model=load_model(net))
    score = traded_containment(problem, box, None)
    x = samples_in(rng, box, 300)
    S, B, n = x.shape
    with torch.no_grad():
        h = net(torch.tensor(x.reshape(-1, n)))[:, 0].numpy().reshape(S, B)
    c = system.constraint(x.reshape(-1, n)).reshape(S, B)
    bad = (c < 0) & (h > -score[None, :] + 1e-12 * (1 + np.abs(h)))
    assert not bad.any(), f"h {h[bad][0]!r} above the bound {-score[np.nonzero(bad)[1][0]]!r} where c < 0"
    return score


@pytest.mark.parametrize("act", ["softplus", "tanh", "gelu", "relu"])
@pytest.mark.parametrize("name", ["point_robot", "obstacle_avoidance"])
def test_where_the_constraint_fails_h_stays_below_minus_the_score(act, name):
    rng = np.random.default_rng(40 + ["softplus", "tanh", "gelu", "relu"].index(act))
    system = get_system(name)
    net = random_net(act, system.n, 2, seed=5, gain=2.0)
    box = _rim_boxes(rng, system, 256)
    with torch.no_grad():                      # h < 0 on the obstacle's rim's inner side, mostly
        net[-1].bias -= float(net(torch.tensor(box.mid))[:, 0].max()) + 0.05
    score = _assert_sound(net, system, box, rng)
    assert np.isfinite(score).mean() > 0.9


def test_it_proves_rim_boxes_whose_outer_part_lies_in_the_set():
    """A barrier built to be >= 0 just outside the disk (softplus of p along 16 directions,
    summed: nearly |p|): on boxes across the rim whose outer part reaches h >= 0, the interval
    check fails, yet the traded bound proves many of them."""
    system = get_system("point_robot")
    k = 16
    net = torch.nn.Sequential(torch.nn.Linear(4, k), torch.nn.Softplus(beta=8.0), torch.nn.Linear(k, 1)).double()
    with torch.no_grad():
        theta = torch.arange(k, dtype=torch.float64) * (2 * np.pi / k)
        net[0].weight.copy_(torch.stack([torch.cos(theta), torch.sin(theta), 0 * theta, 0 * theta], 1))
        net[0].bias.zero_()
        net[2].weight.fill_(np.pi / k)
        net[2].bias.zero_()
        ang = torch.linspace(-np.pi, np.pi, 4001, dtype=torch.float64)
        rim = torch.stack([0.5 * torch.cos(ang), 0.5 * torch.sin(ang), 0 * ang, 0 * ang], 1)
        net[2].bias.fill_(-float(net(rim)[:, 0].max()) - 0.02)    # h < 0 on the disk (h is convex in p)
    rng = np.random.default_rng(9)
    box = _rim_boxes(rng, system, 512, shift=(0.0, 0.05), widths=(-1.4, -0.9))
    score = _assert_sound(net, system, box, rng)
    with torch.no_grad():
        reaches_set = net(torch.tensor(samples_in(rng, box, 64).reshape(-1, 4)))[:, 0].numpy().reshape(64, -1).max(0) >= 0
    nearest = np.clip(0.0, box.lo[:, :2], box.hi[:, :2])            # the box's point nearest the disk's centre
    meets_disk = np.hypot(nearest[:, 0], nearest[:, 1]) < system.params.radius
    proven = (score > 0) & reaches_set & meets_disk
    sel = reaches_set & meets_disk                 # the interval check fails on every one of these
    assert sel.sum() > 200 and proven.sum() > 0.8 * sel.sum(), (proven.sum(), sel.sum())
