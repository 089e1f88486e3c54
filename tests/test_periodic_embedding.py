"""The periodic input embedding (compiler/periodic.py) through the compiler: IR, passes, the
numpy reference and the torch frontend. A wrapped angle theta (period P) enters the network as
(sin 2 pi theta / P, cos 2 pi theta / P); every result is compared with torch float64 autograd
(first order) and double backward (second order) of the very module training builds."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn

from compiler import reference
from compiler.errors import ShapeError, UnsupportedOpError
from compiler.frontend_torch import load_torch
from compiler.ir import Dense, Model, Periodic, validate
from compiler.passes import canonicalize
from compiler.periodic import periodic_embedding
from torch_reference import lie2_autograd, lie_autograd, max_rel_error

TWO_PI = 2.0 * math.pi
ACTS = {"softplus": nn.Softplus, "tanh": nn.Tanh, "relu": nn.ReLU}


def barrier(n: int, periods: dict, act: str = "softplus", hidden=(16, 16), seed: int = 0) -> nn.Sequential:
    """The network training builds: embedding, then Linear (act Linear)*."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = [periodic_embedding(n, periods)]
    width = n + len(periods)
    for h in hidden:
        layers += [nn.Linear(width, h), ACTS[act]()]
        width = h
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


def states(n: int, periodic: list[int], count: int = 64, seed: int = 1) -> np.ndarray:
    """Random states with large |theta| (1e3), the seam +-pi and its float neighbours."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(count, n)) * 2.0
    for i in periodic:
        x[: count // 4, i] = rng.uniform(-1e3, 1e3, count // 4)
        seam = np.array([math.pi, -math.pi, np.nextafter(math.pi, 0), np.nextafter(-math.pi, 0), 3 * math.pi,
                         -1001 * math.pi])
        x[count // 4: count // 4 + seam.size, i] = seam
    return x


def fields(x: np.ndarray, m: int, seed: int = 2):
    rng = np.random.default_rng(seed)
    batch, n = x.shape
    return (rng.normal(size=(batch, n)), rng.normal(size=(batch, n, m)), rng.normal(size=(batch, n)),
            rng.normal(size=(batch, n, m)))


# ---------------------------------------------------------------- IR and torch frontend
def test_torch_frontend_reads_the_embedding_as_the_first_layer_and_keeps_the_state_width():
    net = barrier(3, {2: TWO_PI}, hidden=(8,))
    model = canonicalize(load_torch(net))
    assert isinstance(model.layers[0], Periodic) and model.layers[0].periods == ((2, TWO_PI),)
    assert model.input_dim == 3 and model.embedded_dim == 4
    assert model.widths() == [4, 8, 1] and model.describe_widths() == "3>4-8-1"
    assert model.layers[0].frequencies() == {2: 1.0}       # 2 pi / 2 pi, the module's own float64 w


def test_canonicalize_keeps_the_embedding_first_and_folds_batchnorm_after_it():
    torch.manual_seed(3)
    bn = nn.BatchNorm1d(5)
    bn.running_mean.normal_()
    bn.running_var.uniform_(0.5, 2.0)
    net = nn.Sequential(periodic_embedding(3, {0: 1.0, 2: TWO_PI}), bn, nn.Linear(5, 6), nn.Tanh(),
                        nn.Linear(6, 6), nn.Linear(6, 1)).eval()
    model = canonicalize(load_torch(net))
    assert [type(layer).__name__ for layer in model.layers] == ["Periodic", "Dense", "Activation", "Dense"]
    x = states(3, [0, 2])
    assert max_rel_error(reference.value(model, x), net.double()(torch.tensor(x)).detach().numpy()[:, 0]) < 1e-13


def test_fingerprint_includes_the_periods():
    a = canonicalize(load_torch(barrier(3, {2: TWO_PI}, hidden=(8,))))
    b = canonicalize(load_torch(barrier(3, {2: 360.0}, hidden=(8,))))
    c = canonicalize(load_torch(barrier(3, {1: TWO_PI}, hidden=(8,))))
    assert len({a.fingerprint(), b.fingerprint(), c.fingerprint()}) == 3
    assert a.fingerprint() == canonicalize(load_torch(barrier(3, {2: TWO_PI}, hidden=(8,)))).fingerprint()


@pytest.mark.parametrize("act", sorted(ACTS))
def test_reference_equals_torch_float64_first_order(act):
    net = barrier(4, {0: 360.0, 3: TWO_PI}, act=act)
    model = canonicalize(load_torch(net))
    x = states(4, [0, 3])
    f, G, _, _ = fields(x, 2)
    got = reference.lie(model, x, f, G)
    want = lie_autograd(net, x, f, G)
    for g, w in zip(got, want):
        assert max_rel_error(g, w) < 1e-12


@pytest.mark.parametrize("act", ["softplus", "tanh"])
def test_reference_equals_torch_double_backward_second_order(act):
    net = barrier(3, {2: TWO_PI}, act=act)
    model = canonicalize(load_torch(net))
    x = states(3, [2])
    f, G, Dff, DfG = fields(x, 2)
    got = reference.lie2(model, x, f, G, Dff, DfG)
    want = lie2_autograd(net, x, f, G, Dff, DfG)
    for g, w in zip(got, want):
        assert max_rel_error(g, w) < 1e-11


def test_reference_is_periodic_in_the_wrapped_coordinate():
    model = canonicalize(load_torch(barrier(3, {2: 360.0})))
    x = states(3, [2], count=16)
    shifted = x.copy()
    shifted[:, 2] += 360.0 * 7
    assert np.allclose(reference.value(model, x), reference.value(model, shifted), rtol=0, atol=1e-12)


def test_embedding_not_first_is_refused_in_one_line():
    net = nn.Sequential(nn.Linear(3, 3), periodic_embedding(3, {2: TWO_PI}), nn.Linear(4, 1))
    with pytest.raises(UnsupportedOpError, match=r"^1 \(PeriodicEmbedding\): the periodic embedding must be the "
                                                  r"first layer .* follows 0 \(Linear\)$"):
        load_torch(net)


def test_ir_refuses_a_periodic_layer_that_is_not_first_or_out_of_range():
    dense = Dense(np.ones((1, 4)), np.zeros(1), "d")
    emb = Periodic(((2, TWO_PI),), 3, "emb")
    validate(Model((emb, dense), 3), canonical=True)
    with pytest.raises(UnsupportedOpError, match="layer 1 Periodic .*must be the first layer"):
        validate(Model((Dense(np.eye(3), np.zeros(3), "a"), emb, dense), 3))
    with pytest.raises(ShapeError, match=r"periodic coordinate 3 is not a state index in 0\.\.2"):
        validate(Model((Periodic(((3, TWO_PI),), 3, "emb"), dense), 3))
    with pytest.raises(ValueError, match=r"coordinate 2: the period must be a finite float > 0, got -1\.0"):
        validate(Model((Periodic(((2, -1.0),), 3, "emb"), dense), 3))
    with pytest.raises(ShapeError, match="embeds a 2-state but the model's input dimension is 3"):
        validate(Model((Periodic(((1, TWO_PI),), 2, "emb"), Dense(np.ones((1, 3)), np.zeros(1))), 3))


def test_module_periods_out_of_range_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^periodic coordinate 5 is not a state index in 0\.\.2$"):
        periodic_embedding(3, {5: TWO_PI})
    emb = periodic_embedding(3, {2: TWO_PI})
    emb.periods = {2: float("nan")}                     # edited after construction
    with pytest.raises(UnsupportedOpError, match=r"^0 \(PeriodicEmbedding\): periodic coordinate 2: the period "
                                                  r"must be a finite number > 0, got nan$"):
        load_torch(nn.Sequential(emb, nn.Linear(4, 1)))


def test_a_subclass_of_the_embedding_is_refused():
    from compiler.periodic import PeriodicEmbedding

    class Shifted(PeriodicEmbedding):
        def forward(self, x):
            return super().forward(x) + 1.0

    with pytest.raises(UnsupportedOpError, match="subclass of PeriodicEmbedding"):
        load_torch(nn.Sequential(Shifted(3, {2: TWO_PI}), nn.Linear(4, 1)))


def test_a_multi_row_state_with_an_embedding_is_refused():
    net = nn.Sequential(periodic_embedding(3, {2: TWO_PI}), nn.Linear(4, 2), nn.Flatten(), nn.Linear(4, 1))
    with pytest.raises(UnsupportedOpError, match="needs a vector state, not state_shape"):
        load_torch(net, state_shape=(2, 3))
