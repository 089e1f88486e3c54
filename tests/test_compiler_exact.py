"""Three-way agreement: PyTorch float64 autograd / double backward, the numpy reference
interpreter, and the compiled header (float32 and float64), on the paper's networks and
on random networks of every activation."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from compiler import reference
from compiler.api import compile_model
from training.architectures import ACTIVATION_NAMES, mlp
from tests.torch_reference import lie2_autograd, lie_autograd, max_rel_error

pytestmark = pytest.mark.toolchain
FLOAT_TOL = 1e-5      # float32 header vs float64 reference, relative to the output's scale
DOUBLE_TOL = 1e-12
SMOOTH = ("tanh", "sigmoid", "softplus", "silu", "gelu", "gelu_tanh")


def states(rng, batch, n, m, scale=3.0):
    return (rng.uniform(-scale, scale, (batch, n)), rng.normal(size=(batch, n)), rng.normal(size=(batch, n, m)),
            rng.normal(size=(batch, n)), rng.normal(size=(batch, n, m)))


def check_first_order(net, m, x, f, G, tol_float=FLOAT_TOL, dtypes=("float", "double")):
    from cbfsim.runtime import compile_barrier
    ref_torch = lie_autograd(net, x, f, G)
    model = compile_model(net, inputs=m).model
    ref_interp = reference.lie(model, x, f, G)
    for a, b in zip(ref_interp, ref_torch):
        assert max_rel_error(a, b) < 1e-12
    for dtype in dtypes:
        lib = compile_barrier(net, inputs=m, dtype=dtype)
        got = lib.lie(x, f, G)
        tol = tol_float if dtype == "float" else DOUBLE_TOL
        for what, a, b in zip(("h", "L_f h", "L_G h"), got, ref_torch):
            assert max_rel_error(a, b) < tol, f"{dtype} {what}: {max_rel_error(a, b):.3g}"


def check_second_order(net, m, x, f, G, Dff, DfG, dtypes=("float", "double")):
    from cbfsim.runtime import compile_barrier
    ref_torch = lie2_autograd(net, x, f, G, Dff, DfG)
    model = compile_model(net, inputs=m, order=2).model
    ref_interp = reference.lie2(model, x, f, G, Dff, DfG)
    for a, b in zip(ref_interp, ref_torch):
        assert max_rel_error(a, b) < 1e-11
    for dtype in dtypes:
        lib = compile_barrier(net, inputs=m, order=2, dtype=dtype)
        got = lib.lie2(x, f, G, Dff, DfG)
        tol = FLOAT_TOL if dtype == "float" else 1e-11
        names = ("h", "L_f h", "L_G h", "L_f^2 h", "L_G L_f h")
        for what, a, b in zip(names, got, ref_torch):
            assert max_rel_error(a, b) < tol, f"{dtype} {what}: {max_rel_error(a, b):.3g}"
        first = lib.lie(x, f, G)          # a second-order library provides the first-order entry too
        for a, b in zip(first, ref_torch[:3]):
            assert max_rel_error(a, b) < tol


PAPER = [("bicycle", [4, 32, 32, 1], "relu", 2), ("van_der_pol", [2, 64, 64, 1], "relu", 1)]


@pytest.mark.parametrize("name,widths,act,m", PAPER, ids=[p[0] for p in PAPER])
def test_paper_networks_first_order(name, widths, act, m):
    rng = np.random.default_rng(1)
    x, f, G, _, _ = states(rng, 500, widths[0], m)
    check_first_order(mlp(widths, act, seed=2), m, x, f, G)


def test_paper_pendulum_second_order():
    """Pendulum: softplus 1-32-32-1 on theta alone, as the equivalent 2-input network with a zero theta_dot column."""
    net = mlp([2, 32, 32, 1], "softplus", seed=3)
    with torch.no_grad():
        net[0].weight[:, 1] = 0.0
    rng = np.random.default_rng(4)
    x, f, G, Dff, DfG = states(rng, 400, 2, 1)
    check_second_order(net, 1, x, f, G, Dff, DfG)


def random_case(seed: int):
    rng = np.random.default_rng(seed)
    depth = int(rng.integers(1, 6))
    n = int(rng.integers(1, 7))
    widths = [n] + [int(rng.integers(1, 97)) for _ in range(depth - 1)] + [1]
    act = ACTIVATION_NAMES[seed % len(ACTIVATION_NAMES)]
    m = int(rng.integers(1, 5))
    scale = float(rng.choice([1.0, 5.0, 50.0]))
    return widths, act, m, scale, rng


@pytest.mark.parametrize("seed", range(20))
def test_random_networks_first_order(seed):
    widths, act, m, scale, rng = random_case(seed)
    x, f, G, _, _ = states(rng, 64, widths[0], m, scale)
    check_first_order(mlp(widths, act, seed=seed), m, x, f, G, dtypes=("float",) if seed % 3 else ("float", "double"))


@pytest.mark.parametrize("seed", range(10))
def test_random_networks_second_order(seed):
    widths, _, m, scale, rng = random_case(100 + seed)
    act = SMOOTH[seed % len(SMOOTH)]
    x, f, G, Dff, DfG = states(rng, 64, widths[0], m, scale)
    check_second_order(mlp(widths, act, seed=seed), m, x, f, G, Dff, DfG, dtypes=("float",) if seed % 2 else ("float", "double"))


@pytest.mark.parametrize("act", ACTIVATION_NAMES)
def test_large_magnitude_states_do_not_overflow(act):
    """|x| up to 1e4: no overflow in softplus/sigmoid/exp; still the float64 answer."""
    from cbfsim.runtime import compile_barrier
    net = mlp([3, 16, 16, 1], act, seed=5)
    rng = np.random.default_rng(6)
    x = rng.choice([-1.0, 1.0], (200, 3)) * 10.0 ** rng.uniform(0, 4, (200, 3))
    f, G = rng.normal(size=(200, 3)), rng.normal(size=(200, 3, 2))
    got = compile_barrier(net, inputs=2).lie(x, f, G)
    for a, b in zip(got, lie_autograd(net, x, f, G)):
        assert np.all(np.isfinite(a))
        assert max_rel_error(a, b) < FLOAT_TOL


@pytest.mark.parametrize("act", SMOOTH)
def test_large_magnitude_second_order(act):
    from cbfsim.runtime import compile_barrier
    net = mlp([2, 16, 16, 1], act, seed=7)
    rng = np.random.default_rng(8)
    x = rng.choice([-1.0, 1.0], (200, 2)) * 10.0 ** rng.uniform(0, 4, (200, 2))
    x, f, G, Dff, DfG = (x, *states(rng, 200, 2, 1)[1:])
    got = compile_barrier(net, inputs=1, order=2).lie2(x, f, G, Dff, DfG)
    for a, b in zip(got, lie2_autograd(net, x, f, G, Dff, DfG)):
        assert np.all(np.isfinite(a))
        assert max_rel_error(a, b) < FLOAT_TOL


@pytest.mark.parametrize("act", ["relu", "leaky_relu", "hardtanh", "elu"])
def test_kink_derivatives_follow_pytorch(act):
    """Preactivations exactly on the kink (0 for ReLU family, the bounds for Hardtanh): the
    compiled derivative is the one PyTorch's autograd returns (ReLU'(0) = 0)."""
    from cbfsim.runtime import compile_barrier
    net = mlp([2, 4, 1], act, seed=9).double()
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0]]))
        net[0].bias.copy_(torch.tensor([0.0, -1.0, 1.0, 0.0]))   # kinks at x0 = 0, x1 = +-1
    x = np.array([[0.0, 1.0], [0.0, -1.0], [-1.0, 0.0], [0.0, 0.0]])
    f, G = np.ones((4, 2)), np.stack([np.eye(2)] * 4)
    ref = lie_autograd(net, x, f, G)
    for dtype in ("float", "double"):
        got = compile_barrier(net, inputs=2, dtype=dtype).lie(x, f, G)
        for a, b in zip(got, ref):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_nan_and_inf_propagate_to_every_output():
    from cbfsim.runtime import compile_barrier
    for order, act in ((1, "relu"), (2, "softplus")):
        lib = compile_barrier(mlp([3, 8, 1], act, seed=10), inputs=2, order=order)
        rng = np.random.default_rng(11)
        x, f, G, Dff, DfG = states(rng, 5, 3, 2)
        x[1, 0] = np.nan          # a NaN that a ReLU gate (nan > 0 is false) would otherwise swallow
        f[2, 2] = np.inf
        G[3, 1, 1] = -np.inf
        out = lib.lie(x, f, G) if order == 1 else lib.lie2(x, f, G, Dff, DfG)
        for arr in out:
            arr = np.asarray(arr).reshape(5, -1)
            assert np.all(np.isnan(arr[1:4]))
            assert np.all(np.isfinite(arr[[0, 4]]))
        single = lib.lie(x[1], f[1], G[1])
        assert all(np.all(np.isnan(v)) for v in single)
