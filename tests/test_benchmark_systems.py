"""The literature's benchmark plants (Darboux, obstacle avoidance, CWH spacecraft, hi-ord8):
f, G and the constraint against hand-written numpy, the Jacobian-vector product against torch
autograd, and their published domains and input bounds."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from systems import get_system  # noqa: E402

N_ORBIT = 0.0565


def _darboux(x):
    x1, x2 = x[:, 0], x[:, 1]
    return np.stack([x2 + 2 * x1 * x2, -x1 + 2 * x1**2 - x2**2], 1), np.zeros((len(x), 2, 0)), x1 + x2**2


def _obstacle(x):
    px, py, psi = x.T
    G = np.zeros((len(x), 3, 1))
    G[:, 2, 0] = 1.0
    return np.stack([np.sin(psi), np.cos(psi), 0 * psi], 1), G, px**2 + py**2 - 0.04


def _spacecraft(x):
    n = N_ORBIT
    A = np.zeros((6, 6))
    A[0, 3] = A[1, 4] = A[2, 5] = 1.0
    A[3, 0], A[3, 4] = 3 * n * n, 2 * n
    A[4, 3] = -2 * n
    A[5, 2] = -n * n
    G = np.tile(np.vstack([np.zeros((3, 3)), np.eye(3)]), (len(x), 1, 1))
    return x @ A.T, G, (x[:, :3] ** 2).sum(1) - 0.25**2


def _hi_ord8(x):
    roots = np.repeat([-1.0, -2.0, -3.0, -4.0], 2)
    c = np.poly(roots)                                 # 1, 20, 170, ..., 576 from the roots
    A = np.eye(8, k=1)
    A[7] = -c[::-1][:8]
    return x @ A.T, np.zeros((len(x), 8, 0)), ((x + 2.0) ** 2).sum(1) - 0.25


CASES = {
    "darboux": (_darboux, [-2] * 2, [2] * 2, []),
    "obstacle_avoidance": (_obstacle, [-2] * 3, [2] * 3, [2.0]),
    "spacecraft": (_spacecraft, [-2, -2, -2, -1, -1, -1], [2, 2, 2, 1, 1, 1], [1.0] * 3),
    "hi_ord8": (_hi_ord8, [-2] * 8, [2] * 8, []),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_plant_matches_a_hand_written_numpy_model(name):
    ref, lo, hi, u_max = CASES[name]
    s = get_system(name)
    x = np.random.default_rng(0).uniform(lo, hi, size=(64, s.n))
    f, G, c = ref(x)
    np.testing.assert_allclose(s.f(x), f, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(s.G(x), G, rtol=0, atol=0)
    np.testing.assert_allclose(s.constraint(x), c, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(s.domain[0], lo)
    np.testing.assert_array_equal(s.domain[1], hi)
    np.testing.assert_array_equal(s.u_max, u_max)
    np.testing.assert_array_equal(s.u_min, [-u for u in u_max])


@pytest.mark.parametrize("name", sorted(CASES))
def test_jacobian_vector_product_matches_torch_autograd(name):
    s = get_system(name)
    rng = np.random.default_rng(1)
    lo, hi = s.domain
    x = rng.uniform(lo, hi, size=(16, s.n))
    v = rng.normal(size=(16, s.n))
    _, tangent = torch.func.jvp(s.f_torch, (torch.tensor(x),), (torch.tensor(v),))
    np.testing.assert_allclose(s.df(x, v), tangent.numpy(), rtol=1e-12, atol=1e-12)
    xt = torch.tensor(x, requires_grad=True)
    G = s.G_torch(xt)
    assert tuple(G.shape) == (16, s.n, s.m)


def test_hi_ord8_is_the_published_polynomial_and_stable():
    s = get_system("hi_ord8")
    A = s.jacobian(np.zeros(8))
    np.testing.assert_allclose(np.poly(A), [1, 20, 170, 800, 2273, 3980, 4180, 2400, 576], rtol=1e-9)
    assert np.all(np.linalg.eigvals(A).real < 0)


def test_darboux_records_its_initial_set_as_data_inside_the_safe_set():
    s = get_system("darboux")
    (a, b), (c, d) = s.initial_set
    assert (a, b, c, d) == (0.0, 1.0, 1.0, 2.0)
    grid = np.stack(np.meshgrid(np.linspace(a, b, 21), np.linspace(c, d, 21)), -1).reshape(-1, 2)
    assert np.all(s.constraint(grid) > 0)


def test_benchmark_presets_train_the_published_network_sizes():
    from training.presets import preset
    sizes = {"darboux": ("darboux", [32, 32]), "obstacle_avoidance": ("obstacle_avoidance", [32]),
             "obstacle_avoidance_relu": ("obstacle_avoidance", [32]), "spacecraft": ("spacecraft", [16, 16, 16]),
             "obstacle_avoidance_64": ("obstacle_avoidance", [64, 64]),
             "obstacle_avoidance_relu_64": ("obstacle_avoidance", [64, 64]),
             "spacecraft_relu": ("spacecraft", [16, 16, 16]), "hi_ord8": ("hi_ord8", [16])}
    for name, (system, hidden) in sizes.items():
        cfg = preset(name)
        assert cfg.system == system and cfg.hidden == hidden
        assert cfg.build_system().name == system
    for name in ("obstacle_avoidance_relu", "obstacle_avoidance_relu_64", "spacecraft_relu", "spacecraft_8_relu"):
        cfg = preset(name)
        assert cfg.activation == "relu" and (cfg.teacher_activation == "softplus") != (cfg.teacher is not None)
        cfg.resolve(cfg.build_system())                 # a distillation the trainer accepts
