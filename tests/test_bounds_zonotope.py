"""compiler/bounds_zonotope.py: the zonotope's pre-activation bounds hold every sampled state's
pre-activations, computed independently by torch float64 forward hooks, for random networks of
every activation on tiny to large boxes and boxes centred on a first-layer kink; and on a ReLU
network they are tighter than the interval enclosure where it counts (fewer unstable neurons),
which is what the pattern certifier (training/certify/patterns.py) takes them for.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from compiler.api import load_model
from compiler.bounds import enclose
from compiler.bounds_zonotope import preactivation_bounds
from compiler.interval import Interval
from compiler.ir import Activation
from training.architectures import ACTIVATION_NAMES

from test_bounds import assert_contains, random_boxes, random_net, samples_in


def torch_preactivations(net: torch.nn.Sequential, x: np.ndarray) -> list[np.ndarray]:
    """The input of every activation module of ``net`` at states x (K, n), float64."""
    out, a = [], torch.as_tensor(x, dtype=torch.float64)
    with torch.no_grad():
        for layer in net:
            if not isinstance(layer, torch.nn.Linear):
                out.append(a.numpy().copy())
            a = layer(a)
    return out


@pytest.mark.parametrize("act", ACTIVATION_NAMES)
def test_every_sampled_preactivation_lies_in_its_zonotope_bound(act):
    rng = np.random.default_rng(abs(hash(("zonotope", act))) % 2 ** 32)
    for trial, (inputs, hidden) in enumerate([(2, 1), (3, 2), (4, 3)]):
        net = random_net(act, inputs, hidden, seed=trial)
        box = random_boxes(rng, net, inputs, 48)
        bounds = preactivation_bounds(load_model(net), box)
        x = samples_in(rng, box, 12)
        S, B = x.shape[:2]
        values = torch_preactivations(net, x.reshape(-1, inputs))
        assert len(bounds) == len(values) == hidden
        for k, (bound, value) in enumerate(zip(bounds, values)):
            assert_contains(bound.broadcast_to((S, B, value.shape[1])), value.reshape(S, B, -1), f"{act} layer {k}")


def test_on_a_relu_network_fewer_neurons_are_unstable_than_by_intervals():
    """Three layers of 16, boxes a tenth of the domain wide: the zonotope leaves fewer
    neurons whose bound straddles 0 than the interval enclosure (summed over the boxes), and
    never more per neuron once intersected with it (as patterns.preactivation_enclosures does)."""
    torch.manual_seed(4)
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.ReLU(),
                              torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).double()
    model = load_model(net)
    rng = np.random.default_rng(5)
    lo = rng.uniform(-1, 0.8, (300, 6))
    box = Interval(lo, lo + 0.2)
    trace: list = []
    enclose(model, box, order=0, trace=trace)
    plain = [a for layer, a in trace if isinstance(layer, Activation)]
    tight = preactivation_bounds(model, box)
    straddles = lambda lo_, hi_: int(np.sum((lo_ < 0) & (hi_ > 0)))   # noqa: E731
    by_intervals = sum(straddles(a.lo, a.hi) for a in plain)
    by_zonotope = sum(straddles(np.maximum(a.lo, z.lo), np.minimum(a.hi, z.hi)) for a, z in zip(plain, tight))
    assert by_zonotope < 0.8 * by_intervals, (by_zonotope, by_intervals)
