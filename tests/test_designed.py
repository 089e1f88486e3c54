"""A barrier written down rather than trained (training/designed.py) for the 8-D hi-ord8 plant:
the half-space of A's left eigenvector (systems.hi_ord8:eigen_halfspace). Its invariance is
checked against the exact flow (scipy's matrix exponential), the network against torch float64
autograd, and the certifier must prove it in 8 dimensions and refute a wrong offset with a
counterexample that torch confirms."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from systems.hi_ord8 import COEFFS, EIGEN_OFFSET, eigen_halfspace, hi_ord8, left_eigenvector  # noqa: E402
from training.designed import affine_softplus_network  # noqa: E402

LO, HI = [-2.0] * 8, [2.0] * 8


def _companion() -> np.ndarray:
    A = np.zeros((8, 8))
    A[np.arange(7), np.arange(1, 8)] = 1.0
    A[7] = -np.asarray(COEFFS, dtype=float)
    return A


def _torch_terms(net, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """h and L_f h = grad h . A x by float64 autograd."""
    seq = net.double()
    X = torch.as_tensor(x).requires_grad_(True)
    h = seq(X)[:, 0]
    (g,) = torch.autograd.grad(h.sum(), X)
    return h.detach().numpy(), np.einsum("bi,bi->b", g.numpy(), x @ _companion().T)


def test_the_eigen_half_space_is_invariant_under_the_exact_flow_and_separates_the_sets():
    from scipy.linalg import expm
    system, rng = hi_ord8(), np.random.default_rng(0)
    x0 = rng.uniform(-2, 2, size=(4000, 8))
    x0 = x0[eigen_halfspace(system, x0) >= 0][:500]
    assert len(x0) == 500
    w, A = left_eigenvector(), _companion()
    for t in (0.01, 0.1, 0.5, 1.0, 3.0):
        xt = x0 @ expm(A * t).T
        np.testing.assert_allclose(xt @ w, np.exp(-t) * (x0 @ w), rtol=1e-9, atol=1e-9)
        assert eigen_halfspace(system, xt).min() >= 0
    # h >= 0 on the initial ball, h < 0 on the unsafe ball's part in D (its worst point included)
    d = rng.normal(size=(5000, 8))
    d *= 0.5 * rng.uniform(size=(5000, 1)) ** (1 / 8) / np.linalg.norm(d, axis=1, keepdims=True)
    assert eigen_halfspace(system, 1.0 + d).min() > 0
    unsafe = np.vstack([-2.0 + np.abs(d), -2.0 + 0.5 * w])
    assert system.constraint(unsafe).max() <= 1e-12
    assert eigen_halfspace(system, unsafe).max() < 0


def test_the_network_is_the_affine_function_within_its_stated_error_and_its_gradient_is_w():
    w = left_eigenvector()
    net, error = affine_softplus_network(w, EIGEN_OFFSET, LO, HI, hidden=16)
    assert [tuple(p.shape) for p in net.parameters()] == [(16, 8), (16,), (1, 16), (1,)]
    x = np.vstack([np.random.default_rng(1).uniform(-2, 2, size=(2000, 8)), np.full((1, 8), -2.0),
                   np.full((1, 8), 2.0)])
    seq = net.double()
    X = torch.as_tensor(x).requires_grad_(True)
    h = seq(X)[:, 0]
    (g,) = torch.autograd.grad(h.sum(), X)
    w32 = seq[0].weight.detach().numpy()[0]             # the weights as float32 stores them
    assert np.abs(w32 - w).max() < 1e-7
    assert 0 < error < 1e-4
    assert np.abs(h.detach().numpy() - (x @ w + EIGEN_OFFSET)).max() <= error + 1e-5
    np.testing.assert_allclose(g.numpy(), np.tile(w32, (len(x), 1)), rtol=2 * error, atol=1e-12)


def test_a_domain_too_wide_for_the_linear_regime_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"spans \[.*\] over the domain: too wide") as err:
        affine_softplus_network(left_eigenvector(), 0.0, [-20.0] * 8, [20.0] * 8)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="one length"):
        affine_softplus_network(left_eigenvector(), 0.0, [-2.0] * 7, [2.0] * 7)


@pytest.mark.toolchain
def test_the_certifier_proves_the_designed_8d_barrier_and_refutes_a_wrong_offset(tmp_path):
    from training.certify import certify_module
    claim = dict(condition="boundary", initial_set=["plant"], scope="in-domain", time_limit=120)
    good, _ = affine_softplus_network(left_eigenvector(), EIGEN_OFFSET, LO, HI)
    cert = certify_module(good, "hi_ord8", onnx_path=tmp_path / "good.onnx", **claim)
    assert cert.certified, cert.summary()
    assert cert.boxes["undecided"] == 0 and cert.conditions["initial"].proven

    # offset -0.5: on {h = 0}, w.x = 0.5, so hdot = -w.x = -0.5 < 0 everywhere on it
    bad, _ = affine_softplus_network(left_eigenvector(), -0.5, LO, HI)
    cert = certify_module(bad, "hi_ord8", onnx_path=tmp_path / "bad.onnx", **claim)
    assert not cert.certified
    found = cert.conditions["feasibility"].counterexamples
    assert found and "h = 0" in found[0]["quantity"]
    h, lf = _torch_terms(bad, np.array([c["x"] for c in found]))
    assert np.abs(h).max() < 1e-4 and lf.max() < -0.4
