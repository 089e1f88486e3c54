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


# ---------------------------------------------------------------- ONNX (legacy exporter)
class Lambda(nn.Module):
    """A module computing ``fn(x)``: the look-alikes of the embedding the ONNX frontend refuses."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _export(net: nn.Module, n: int, tmp_path, name: str = "m"):
    from training.network import export_onnx
    return export_onnx(net, tmp_path / f"{name}.onnx", n)


@pytest.mark.parametrize("act", ["softplus", "tanh", "relu"])
def test_exported_onnx_equals_the_torch_module_in_onnxruntime(act, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    net = barrier(4, PERIODS_ONNX, act=act)
    path = _export(net, 4, tmp_path)
    x = states(4, [0, 3]).astype(np.float32)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x})[0][:, 0]
    want = net.float()(torch.tensor(x)).detach().numpy()[:, 0]
    assert max_rel_error(got, want) < 1e-6


PERIODS_ONNX = {0: 360.0, 3: TWO_PI}


@pytest.mark.parametrize("act", ["softplus", "tanh", "relu"])
def test_onnx_frontend_reads_the_embedding_as_the_torch_frontend_does(act, tmp_path):
    from compiler.frontend_onnx import load_onnx
    net = barrier(4, PERIODS_ONNX, act=act)
    onnx_model = canonicalize(load_onnx(_export(net, 4, tmp_path)))
    torch_model = canonicalize(load_torch(net))
    assert onnx_model.layers[0].periods == torch_model.layers[0].periods == ((0, 360.0), (3, TWO_PI))
    if act == "softplus":   # the legacy exporter drops Softplus' threshold (frontend_onnx docstring)
        assert onnx_model.layers[2].params != torch_model.layers[2].params
        return
    assert onnx_model.fingerprint() == torch_model.fingerprint()


@pytest.mark.parametrize("act", ["tanh", "relu"])
def test_onnx_path_gives_the_torch_path_header_bit_for_bit(act, tmp_path):
    from compiler.api import compile_model
    net = barrier(4, PERIODS_ONNX, act=act)
    path = _export(net, 4, tmp_path)
    order = 2 if act == "tanh" else 1
    a = compile_model(path, inputs=2, order=order, name="same")
    b = compile_model(net, inputs=2, order=order, name="same")
    assert a.header == b.header and a.abi == b.abi


@pytest.mark.parametrize("period", [TWO_PI, math.pi, 360.0, 1.0, 2 * math.pi / 3, 24.0, 365.25, 0.001])
def test_the_period_comes_back_from_the_float32_frequency(period):
    from compiler.onnx_periodic import period_from_frequency
    assert period_from_frequency(float(np.float32(2 * math.pi / period))) == period


def _refused(fn, n, tmp_path, match):
    from compiler.frontend_onnx import load_onnx
    with pytest.raises(UnsupportedOpError, match=match) as info:
        load_onnx(_export(fn, n, tmp_path))
    assert "\n" not in str(info.value)


def test_onnx_embedding_not_first_is_refused_naming_the_sin_node(tmp_path):
    net = nn.Sequential(nn.Linear(3, 3), periodic_embedding(3, {2: TWO_PI}), nn.Linear(4, 1))
    _refused(net, 3, tmp_path, r"^Sin node '/1/Sin': Sin and Cos are supported only in the periodic input embedding")


def test_onnx_sin_as_an_activation_is_refused_naming_the_node(tmp_path):
    net = nn.Sequential(nn.Linear(3, 4), Lambda(torch.sin), nn.Linear(4, 1))
    _refused(net, 3, tmp_path, r"^Sin node '/1/Sin': Sin and Cos are supported only in the periodic input")


def test_onnx_embedding_look_alikes_are_refused_naming_the_node(tmp_path):
    cases = [  # cos before sin; two frequencies; sin alone; a shifted angle; a permuted state
        (lambda x: torch.cat([x[..., :2], torch.cos(x[..., 2:3]), torch.sin(x[..., 2:3])], -1),
         r"^Concat node '/0/Concat': its columns \[x0, x1, cos\(1 x2\), sin\(1 x2\)\] are not the periodic"),
        (lambda x: torch.cat([x[..., :2], torch.sin(x[..., 2:3]), torch.cos(2 * x[..., 2:3])], -1),
         r"its columns \[x0, x1, sin\(1 x2\), cos\(2 x2\)\] are not"),
        (lambda x: torch.cat([x[..., :2], torch.sin(x[..., 2:3]), x[..., 2:3]], -1), r"are not the periodic"),
        (lambda x: torch.cat([x[..., :2], torch.sin(x[..., 2:3] + 1), torch.cos(x[..., 2:3] + 1)], -1),
         r"^Sin node '/0/Sin': Sin and Cos are supported only of w \* x_i"),
        (lambda x: torch.cat([x[..., 1:2], x[..., 0:1], torch.sin(x[..., 2:3]), torch.cos(x[..., 2:3])], -1),
         r"columns \[x1, x0, sin\(1 x2\), cos\(1 x2\)\] are not"),
    ]
    for k, (fn, match) in enumerate(cases):
        net = nn.Sequential(Lambda(fn), nn.Linear(4, 1))
        _refused(net, 3, tmp_path / str(k) if (tmp_path / str(k)).mkdir() is None else tmp_path, match)


def test_onnx_embedding_with_a_slice_of_several_columns_is_read(tmp_path):
    from compiler.frontend_onnx import load_onnx
    torch.manual_seed(0)
    net = nn.Sequential(Lambda(lambda x: torch.cat([x[..., :2], torch.sin(0.5 * x[..., 2:3]),
                                                    torch.cos(0.5 * x[..., 2:3])], -1)),
                        nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    model = canonicalize(load_onnx(_export(net, 3, tmp_path)))
    assert model.layers[0].periods == ((2, 4 * math.pi),)
    x = states(3, [2])
    assert max_rel_error(reference.value(model, x), net.double()(torch.tensor(x)).detach().numpy()[:, 0]) < 1e-12


# ---------------------------------------------------------------- interval enclosures (compiler.bounds)
def _torch_jets(net, x):
    """h, grad h, Hessian by torch float64 autograd at the states x (B, n)."""
    X = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    h = net.double()(X)[:, 0]
    (g,) = torch.autograd.grad(h.sum(), X, create_graph=True)
    rows = [torch.autograd.grad(g[:, i].sum(), X, retain_graph=True, allow_unused=True)[0] for i in range(x.shape[1])]
    H = torch.stack([r if r is not None else torch.zeros_like(X) for r in rows], 1)
    return h.detach().numpy(), g.detach().numpy(), H.detach().numpy()


def _boxes(n: int, periodic: list[int], count: int, seed: int):
    """Random boxes, a third centred on the seam +-pi, some wide (a whole turn and more)."""
    from compiler.interval import Interval
    rng = np.random.default_rng(seed)
    c = rng.uniform(-4, 4, (count, n))
    r = rng.uniform(0, 0.4, (count, n))
    for i in periodic:
        c[: count // 3, i] = rng.choice([math.pi, -math.pi], count // 3)
        r[count // 3: count // 3 + 5, i] = [3.0, 4.0, 7.0, 0.0, 1e-9]
        c[-5:, i] = rng.uniform(-1e3, 1e3, 5)
    return Interval(c - r, c + r), rng


@pytest.mark.parametrize("act, order", [("softplus", 2), ("tanh", 2), ("relu", 1)])
@pytest.mark.parametrize("float32", [False, True])
def test_enclosures_contain_torch_float64_on_random_boxes_across_the_seam(act, order, float32):
    from compiler.bounds import enclose
    net = barrier(4, {0: 360.0, 3: TWO_PI}, act=act, hidden=(12, 12), seed=9)
    model = canonicalize(load_torch(net))
    box, rng = _boxes(4, [0, 3], 60, seed=10)
    jets = enclose(model, box, order=order, float32=float32)
    assert jets.grad.shape == (60, 4) and (order < 2 or jets.hess.shape == (60, 4, 4))
    for _ in range(25):
        x = rng.uniform(box.lo, box.hi)
        h, g, H = _torch_jets(net, x)
        assert np.all((jets.h.lo <= h) & (h <= jets.h.hi))
        assert np.all((jets.grad.lo <= g) & (g <= jets.grad.hi))
        if order == 2:
            assert np.all((jets.hess.lo <= H) & (H <= jets.hess.hi))


def test_an_enclosure_missing_the_cosine_derivative_is_caught():
    """The containment test can fail: drop the w^2 sin term of the embedding's second derivative."""
    from compiler import bounds_periodic
    from compiler.bounds import enclose
    net = barrier(3, {2: TWO_PI}, act="tanh", hidden=(8,), seed=2)
    model = canonicalize(load_torch(net))
    box, rng = _boxes(3, [2], 40, seed=3)
    original = bounds_periodic.enclose_embedding

    def mutant(layer, x):
        src, v, d1, d2 = original(layer, x)
        return src, v, d1, d2 * 0.0

    bounds_periodic_enclose = pytest.MonkeyPatch()
    bounds_periodic_enclose.setattr("compiler.bounds.enclose_embedding", mutant)
    try:
        jets = enclose(model, box, order=2)
    finally:
        bounds_periodic_enclose.undo()
    misses = 0
    for _ in range(10):
        x = rng.uniform(box.lo, box.hi)
        H = _torch_jets(net, x)[2]
        misses += int(np.sum((H < jets.hess.lo) | (H > jets.hess.hi)))
    assert misses > 0


def test_a_box_of_a_whole_turn_encloses_every_angle():
    from compiler.bounds import enclose
    from compiler.interval import Interval
    net = barrier(3, {2: TWO_PI}, act="softplus", hidden=(8,), seed=4)
    model = canonicalize(load_torch(net))
    box = Interval(np.array([[0.1, 0.2, -math.pi]]), np.array([[0.1, 0.2, math.pi]]))
    jets = enclose(model, box, order=1)
    theta = np.linspace(-math.pi, math.pi, 2001)
    x = np.column_stack([np.full_like(theta, 0.1), np.full_like(theta, 0.2), theta])
    h = reference.value(model, x)
    assert jets.h.lo[0] <= h.min() and h.max() <= jets.h.hi[0]


def test_lie_terms_of_the_certifier_work_with_an_embedding_unchanged():
    from compiler.interval import Interval
    from training.certify.terms import PlantTerms, lie_terms
    net = barrier(3, {2: TWO_PI}, act="softplus", hidden=(12, 12), seed=6)
    model = canonicalize(load_torch(net))
    box, rng = _boxes(3, [2], 30, seed=7)
    f = rng.normal(size=(30, 3))
    G = rng.normal(size=(30, 3, 1))
    Jf = rng.normal(size=(30, 3, 3))
    plant = PlantTerms(Interval.point(f), Interval.point(G), Interval.point(Jf), Interval.point(np.zeros(30)))
    terms = lie_terms(model, plant, box, 2, {"alpha1": 1.0}, float32=True)
    for _ in range(10):
        x = rng.uniform(box.lo, box.hi)
        h, g, H = _torch_jets(net, x)
        Lf = np.einsum("bi,bi->b", g, f)
        L2 = np.einsum("bi,bij,bj->b", f, H, f) + np.einsum("bi,bij,bj->b", g, Jf, f)
        LGLf = np.einsum("bi,bij,bj->b", G[:, :, 0], H, f) + np.einsum("bi,bij,bj->b", g, Jf, G[:, :, 0])
        for val, enc in ((Lf, terms.Lf), (L2, terms.L2), (LGLf, terms.LGLf[:, 0])):
            assert np.all((enc.lo <= val) & (val <= enc.hi))


def test_pieces_refuses_an_embedding_in_one_line():
    from compiler.bounds import UnsupportedActivationError, pieces
    from compiler.interval import Interval
    model = canonicalize(load_torch(barrier(3, {2: TWO_PI}, act="relu", hidden=(8,))))
    with pytest.raises(UnsupportedActivationError, match="periodic input embedding .* is not affine"):
        pieces(model, Interval(np.zeros((1, 3)), np.ones((1, 3))))


def test_reads_state_maps_embedded_columns_back_to_the_state():
    net = barrier(3, {1: TWO_PI}, hidden=(4,))
    with torch.no_grad():
        net[1].weight[:, 0] = 0.0          # x0 unread
        net[1].weight[:, 1] = 0.0          # sin x1 unread, cos x1 read
    model = canonicalize(load_torch(net))
    assert model.reads_state().tolist() == [False, True, True]
    with torch.no_grad():
        net[1].weight[:, 2] = 0.0
    assert canonicalize(load_torch(net)).reads_state().tolist() == [False, False, True]
