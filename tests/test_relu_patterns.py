"""ReLU activation patterns (training/certify/patterns.py): on a box with few unstable neurons,
every pattern's exact gradient, and the boundary row bound taken piece by piece.

References: torch float64 autograd of the same float32 network (ReLU'(0) = 0) at states sampled
in each box, and the plant's own float64 f and G there.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from compiler.interval import Interval  # noqa: E402
from compiler.frontend_torch import load_torch  # noqa: E402
from systems import get_system  # noqa: E402
from training.certify.patterns import MAX_UNSTABLE, pattern_gradients, pattern_row  # noqa: E402
from training.certify.terms import plant_terms  # noqa: E402


def _net(seed: int, widths=(3, 8, 6, 1)) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    layers = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1]).float().eval()


def _torch_grad(net, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    h = net.double()(xt)[:, 0]
    h.sum().backward()
    return h.detach().numpy(), xt.grad.numpy()


def _boxes(rng, count: int, width: float) -> Interval:
    lo = rng.uniform(-2, 2 - width, (count, 3))
    return Interval(lo, lo + width * rng.uniform(0.3, 1.0, (count, 3)))


@pytest.mark.parametrize("seed", range(4))
def test_every_states_gradient_is_one_of_the_patterns(seed):
    """At states sampled in each box, torch's gradient is one of the box's enumerated patterns'
    (boxes with at most MAX_UNSTABLE unstable neurons), to float64 round-off."""
    net = _net(seed)
    model = load_torch(net, input_dim=3)
    rng = np.random.default_rng(seed)
    box = _boxes(rng, 60, 0.15)
    g, err64, _ = pattern_gradients(model, box)
    kept = np.flatnonzero(~np.isnan(g).any(axis=(1, 2)))
    assert len(kept) >= 20
    for b in kept:
        x = rng.uniform(box.lo[b], box.hi[b], (300, 3))
        _, grad = _torch_grad(net, x)
        gap = np.abs(grad[:, None, :] - g[b][None]).max(-1)          # (samples, P)
        assert np.all(gap.min(1) <= 1e-12 + err64[b].max()), b


@pytest.mark.parametrize("seed", range(4))
def test_the_pattern_row_bounds_the_boundary_row_at_every_sampled_state(seed):
    """The bound over a box is below sup_u (grad h . (f + G u)) at every sampled state, with
    torch's gradient and the plant's float64 f and G (obstacle avoidance, |u| <= 2), and it is
    tighter than the interval product on most boxes."""
    from training.certify.terms import lie_terms, sup_over_inputs
    net = _net(seed)
    model = load_torch(net, input_dim=3)
    system = get_system("obstacle_avoidance")
    from training.certify.problem import plant_enclosure
    plant = plant_enclosure(system)
    rng = np.random.default_rng(10 + seed)
    box = _boxes(rng, 60, 0.15)
    terms = plant_terms(plant, box, 1)
    u_lo, u_hi = np.array([-2.0]), np.array([2.0])
    candidates = [np.full((60, 1), -2.0), np.full((60, 1), 2.0), np.zeros((60, 1))]
    bound = pattern_row(model, box, terms.f, terms.G, candidates)
    decided = np.flatnonzero(np.isfinite(bound))
    assert len(decided) >= 20
    for b in decided:
        x = rng.uniform(box.lo[b], box.hi[b], (400, 3))
        _, grad = _torch_grad(net, x)
        f, G = system.f(x), system.G(x)
        rate = np.einsum("bi,bi->b", grad, f) + np.abs(np.einsum("bi,bij->bj", grad, G)).sum(1) * 2.0
        assert bound[b] <= rate.min(), (b, bound[b], rate.min())
    # where a box holds more than one piece, the interval hull of their gradients loses more
    t = lie_terms(model, terms, box, 1, {"gamma": 1.0}, float32=True)
    interval = (t.Lf + sup_over_inputs(t.LG, u_lo, u_hi)).lo
    g = pattern_gradients(model, box)[0][decided]
    pieces = decided[np.ptp(g, axis=1).max(-1) > 0]
    assert len(pieces) >= 10
    assert np.mean(bound[pieces] > interval[pieces] + 1e-6) > 0.8


def test_boxes_with_too_many_unstable_neurons_are_left_to_the_intervals():
    net = _net(0, widths=(3, 32, 1))
    model = load_torch(net, input_dim=3)
    box = Interval(np.full((1, 3), -2.0), np.full((1, 3), 2.0))
    g, _, _ = pattern_gradients(model, box)
    assert np.isnan(g).all()
    assert MAX_UNSTABLE < 32


def test_a_network_without_hidden_units_has_one_pattern_per_box():
    """An affine barrier (one Dense layer): its one gradient on every box, whatever the batch."""
    net = torch.nn.Sequential(torch.nn.Linear(3, 1)).float().eval()
    model = load_torch(net, input_dim=3)
    box = _boxes(np.random.default_rng(0), 5, 0.2)
    g, _, _ = pattern_gradients(model, box)
    assert g.shape[0] == 5 and np.allclose(g, net[0].weight.detach().double().numpy()[0])


def test_only_dense_and_relu_networks_are_taken():
    from training.certify.patterns import supported
    lin = torch.nn.Linear
    assert supported(load_torch(_net(0), input_dim=3))
    assert supported(load_torch(torch.nn.Sequential(lin(3, 1)), input_dim=3))
    softplus = torch.nn.Sequential(lin(3, 4), torch.nn.Softplus(), lin(4, 1))
    mixed = torch.nn.Sequential(lin(3, 4), torch.nn.ReLU(), lin(4, 4), torch.nn.Tanh(), lin(4, 1))
    assert not supported(load_torch(softplus, input_dim=3)) and not supported(load_torch(mixed, input_dim=3))
