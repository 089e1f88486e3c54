"""Autonomous plants (m = 0, G is n x 0): definition, card, trainer, certifier, simulator and
header.  A stable linear plant with a disk constraint trains on a tiny budget, is certified in
continuous time (the filter's condition, the boundary condition) and for a 10 ms hold, and
simulates with no filter; a filter on it is refused in one line."""
from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import sympy as sp

torch = pytest.importorskip("torch")

import systems  # noqa: E402
from systems.base import ControlAffineSystem, Definition  # noqa: E402


@dataclass(frozen=True)
class SinkParams:
    k: float = 1.0
    r: float = 1.0


class Sink(ControlAffineSystem):
    """xdot = -k x + a rotation, no input; the disk |x| <= r is invariant."""

    name = "autonomous_sink"
    state_names = ("x1", "x2")
    input_names = ()
    Params = SinkParams

    @staticmethod
    def define(x: tuple[sp.Symbol, ...], p: SimpleNamespace) -> Definition:
        x1, x2 = x
        return Definition(f=[-p.k * x1 + x2, -x1 - p.k * x2], G=[[], []], constraint=p.r**2 - x1**2 - x2**2,
                          u_min=[], u_max=[], domain=([-2, -2], [2, 2]), nominal={"none": []})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from training.config import TrainConfig
    from training.trainer import train_barrier
    systems.register("autonomous_sink", Sink, replace=True)
    out = tmp_path_factory.mktemp("sink")
    # the own-plant example's --fast check budgets: the certifier below is the judge here
    cfg = TrainConfig(system="autonomous_sink", hidden=[16, 16], activation="softplus", rounds=6, max_time=50.0,
                      safe_fraction=0.3, seed=0, check_samples=20_000, check_boundary=5_000, verify_samples=20_000)
    train_barrier(cfg, out, progress=False, overwrite=True)
    yield out
    systems.unregister("autonomous_sink")


def test_an_autonomous_plant_has_empty_inputs_in_numpy_torch_and_cpp():
    s = Sink()
    x = np.random.default_rng(0).normal(size=(7, 2))
    assert s.m == 0 and s.G(x).shape == (7, 2, 0) and s.nominal("none")(x).shape == (7, 0)
    np.testing.assert_array_equal(s.xdot(x, np.zeros((7, 0))), np.stack([-x[:, 0] + x[:, 1], -x[:, 0] - x[:, 1]], 1))
    assert tuple(s.G_torch(torch.tensor(x)).shape) == (7, 2, 0)
    src = s.cpp_source("sink")
    assert "kInputDim = 0" in src and "nullptr" in src


def test_an_autonomous_plant_trains_certifies_and_simulates(trained, tmp_path, capsys, monkeypatch):
    import functools
    from training.certify import api, certify
    from training.certify.coverage import refine_inside
    from training.model_card import load_card
    # the coverage refinement runs after the verdict and does not change it: a smaller budget
    # only shortens the test (tests/test_certify_parallel.py does the same)
    monkeypatch.setattr(api, "refine_inside", functools.partial(refine_inside, budget=500))
    card = load_card(trained / "model.json")
    assert card.input_names == [] and card.u_min == [] and card.u_max == []
    for kwargs in ({"dt": 0.0}, {"condition": "boundary"}, {"dt": 0.01}):
        cert = certify(trained / "model.onnx", trained / "model.json", time_limit=120, **kwargs)
        assert cert.certified and cert.certified_coverage > 0, (kwargs, cert.summary())
    # the certified set is invariant: float64 autograd of the exported network along exact flows
    from compiler.api import load_model
    from compiler.reference import value
    model = load_model(trained / "model.onnx")
    rng = np.random.default_rng(2)
    x0 = rng.uniform(-2, 2, size=(4000, 2))
    x0 = x0[value(model, x0) >= 0][:200]
    for t in (0.1, 0.5, 2.0):      # exact solution of the linear plant: e^{-t} rotation
        c, s_ = np.cos(t), np.sin(t)
        xt = np.exp(-t) * np.stack([c * x0[:, 0] + s_ * x0[:, 1], -s_ * x0[:, 0] + c * x0[:, 1]], 1)
        assert np.all(Sink().constraint(xt) >= 0)
    # the simulator runs it with no filter (the CLI's default for m = 0), and refuses a filter
    from cbfsim.cli import main
    args = ["simulate", str(trained / "model.json"), "--x0", "0.5", "0.2", "--t-final", "1", "--out"]
    assert main([*args, str(tmp_path / "sim")]) == 0
    data = np.load(tmp_path / "sim" / "trajectory.npz")
    assert np.all(np.isfinite(data["x"])) and data["x"].shape[-1] == 2
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        main([*args, str(tmp_path / "s2"), "--filter", "osqp"])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and err.count("\n") == 1 and "m = 0" in err, err


def test_a_filter_on_an_autonomous_plant_is_refused_in_one_line():
    from cbfsim.filters import CBFQP
    from cbfsim.filters.base import NoInputError
    with pytest.raises(NoInputError, match="m = 0"):
        CBFQP(Sink())


def test_the_card_takes_empty_inputs_and_still_refuses_a_wrong_one(trained):
    from training.model_card import CardError, load_card
    data = json.loads((trained / "model.json").read_text())
    assert load_card(data).input_names == []
    data["input_names"] = "u"
    with pytest.raises(CardError, match="input_names"):
        load_card(data)


@pytest.mark.parametrize("dtype, tol", [("double", 1e-12), ("float", 1e-5)])
def test_the_header_compiles_with_no_inputs_and_matches_torch_autograd(trained, dtype, tol):
    """inputs=0: lie() gives h and L_f h (L_G h has zero columns), against torch float64."""
    from compiler.api import compile_barrier
    lib = compile_barrier(str(trained / "model.onnx"), inputs=0, order=1, dtype=dtype)
    s = Sink()
    x = np.random.default_rng(4).uniform(-2, 2, size=(64, 2))
    h, lf, lg = lib.lie(x, s.f(x), s.G(x))
    assert np.shape(lg) == (64, 0)
    import onnx
    from onnx import numpy_helper
    weights = [numpy_helper.to_array(t).astype(np.float64) for t in onnx.load(str(trained / "model.onnx")).graph.initializer]
    mats = {w.ndim: [] for w in weights}
    for w in weights:
        mats[w.ndim].append(w)
    xt = torch.tensor(x, requires_grad=True)
    z = xt
    layers = list(zip(mats[2], mats[1]))
    for k, (W, b) in enumerate(layers):
        z = z @ torch.tensor(W).T + torch.tensor(b)
        if k < len(layers) - 1:
            z = torch.nn.functional.softplus(z)
    href = z[:, 0]
    (grad,) = torch.autograd.grad(href.sum(), xt)
    lfref = (grad.numpy() * s.f(x)).sum(1)
    np.testing.assert_allclose(h, href.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(lf, lfref, rtol=tol, atol=tol)
