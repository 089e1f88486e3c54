"""ONNX frontend: models exported by both torch exporters, and hand-built graphs.

Every loaded model is compared with the float64 PyTorch module it came from (same
float32 weights, evaluated in float64: value and directional derivatives) and with
onnxruntime (value, float32 tolerance). Dynamo exports take ~1 s each, so each activation
is exported alone only with the legacy exporter; the dynamo exporter gets one model with
every activation per opset.
"""
from __future__ import annotations

import contextlib
import copy
import io
import random
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from compiler import reference
from compiler.errors import NonFiniteWeightError, ShapeError, UnsupportedOpError
from compiler.frontend_onnx import SOFTPLUS_NO_THRESHOLD, load_onnx
from compiler.ir import Activation, Affine, Dense

ort = pytest.importorskip("onnxruntime")

LEGACY_OPSETS = list(range(11, 21))
DYNAMO_OPSETS = list(range(15, 21))   # the dynamo exporter writes opset 18 when asked for < 15
BIG = SOFTPLUS_NO_THRESHOLD

# name -> (module, expected IR activation from the legacy exporter, ... from dynamo)
ACTIVATIONS = {
    "relu": (lambda: nn.ReLU(), ("relu", {}), None),
    "leaky_relu": (lambda: nn.LeakyReLU(0.23), ("leaky_relu", {"negative_slope": 0.23}), None),
    "hardtanh": (lambda: nn.Hardtanh(-0.4, 1.3), ("hardtanh", {"min_val": -0.4, "max_val": 1.3}), None),
    "relu6": (lambda: nn.ReLU6(), ("hardtanh", {"min_val": 0.0, "max_val": 6.0}), None),
    "elu": (lambda: nn.ELU(0.7), ("elu", {"alpha": 0.7}), None),
    "tanh": (lambda: nn.Tanh(), ("tanh", {}), None),
    "sigmoid": (lambda: nn.Sigmoid(), ("sigmoid", {}), None),
    "softplus": (lambda: nn.Softplus(), ("softplus", {"beta": 1.0, "threshold": BIG}),
                 ("softplus", {"beta": 1.0, "threshold": 20.0})),
    "softplus_beta": (lambda: nn.Softplus(beta=1.5, threshold=3.0), ("softplus", {"beta": 1.5, "threshold": BIG}),
                      ("softplus", {"beta": 1.5, "threshold": 3.0})),
    "silu": (lambda: nn.SiLU(), ("silu", {}), None),
    "gelu": (lambda: nn.GELU(), ("gelu", {"approximate": 0.0}), None),
    "gelu_tanh": (lambda: nn.GELU(approximate="tanh"), ("gelu", {"approximate": 1.0}), None),
}


def expected_activation(name: str, dynamo: bool):
    _, legacy, dyn = ACTIVATIONS[name]
    return dyn if dynamo and dyn is not None else legacy


def mlp(act_names, n_in=3, hidden=6, seed=0, bias=True) -> nn.Sequential:
    """Linear (act Linear)* with weights large enough to reach every activation regime."""
    torch.manual_seed(seed)
    layers, width = [], n_in
    for name in act_names:
        layers += [nn.Linear(width, hidden, bias=bias), ACTIVATIONS[name][0]()]
        width = hidden
    layers.append(nn.Linear(width, 1, bias=bias))
    net = nn.Sequential(*layers)
    with torch.no_grad():
        for m in net:
            if isinstance(m, nn.Linear):
                m.weight.normal_(0.0, 1.6 / m.in_features ** 0.5)
                if m.bias is not None:
                    m.bias.normal_(0.0, 0.3)
    return net.eval()


def export(module, path, *, dynamo, opset=None, example=None, n_in=3, **kwargs):
    example = torch.randn(1, n_in) if example is None else example
    if opset is not None:
        kwargs["opset_version"] = opset
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (example,), str(path), dynamo=dynamo, **kwargs)
    return path


def no_threshold(module):
    """The function the legacy exporter writes for nn.Softplus: its threshold is dropped."""
    module = copy.deepcopy(module)
    for m in module.modules():
        if isinstance(m, nn.Softplus):
            m.threshold = 1e30
    return module


def states(n_in, count=12, seed=1, scale=2.0):
    return np.random.default_rng(seed).normal(size=(count, n_in)) * scale


def ort_values(model_or_path, x):
    """onnxruntime, one state at a time in the input's own (static) shape."""
    data = model_or_path.SerializeToString() if isinstance(model_or_path, onnx.ModelProto) else str(model_or_path)
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    shape = [d if isinstance(d, int) else 1 for d in inp.shape]
    dtype = np.float64 if "double" in inp.type else np.float32
    return np.array([np.ravel(sess.run(None, {inp.name: row.reshape(shape).astype(dtype)})[0])[0] for row in x])


def check_against_torch(ir, module, x, path=None, rtol=1e-12):
    """reference.value / first_order == float64 torch (value, gradient along 3 directions)."""
    ref = copy.deepcopy(module).double().eval()
    xt = torch.tensor(x, requires_grad=True)
    y = ref(xt).reshape(len(x), -1)[:, 0]
    grad = torch.autograd.grad(y.sum(), xt)[0].numpy()
    dirs = np.random.default_rng(7).normal(size=(len(x), x.shape[1], 3))
    h = reference.value(ir, x)
    fo = reference.first_order(ir, x, dirs)
    expected = y.detach().numpy()
    np.testing.assert_allclose(h, expected, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(fo.h, expected, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(fo.directional, np.einsum("bn,bnk->bk", grad, dirs), rtol=1e-10, atol=1e-10)
    if path is not None:
        check_against_ort(ir, path, x)


def check_against_ort(ir, model_or_path, x):
    got, want = reference.value(ir, x), ort_values(model_or_path, x)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * max(1.0, np.abs(want).max()))


def activations_of(ir):
    return [(a.kind, dict(a.params)) for a in ir.layers if isinstance(a, Activation)]


def kinds(ir):
    return [{Dense: "D", Affine: "A", Activation: "S"}[type(layer)] for layer in ir.layers]


# ---- torch exports --------------------------------------------------------------------

@pytest.mark.parametrize("opset", [11, 20])
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_legacy_activation(tmp_path, name, opset):
    net = mlp([name, name])
    path = export(net, tmp_path / f"{name}.onnx", dynamo=False, opset=opset)
    ir = load_onnx(path)
    assert ir.name == name and ir.input_dim == 3 and kinds(ir) == list("DSDSD")
    assert activations_of(ir) == [expected_activation(name, False)] * 2
    x = states(3)
    check_against_torch(ir, no_threshold(net), x, path)


ALL = ["softplus_beta"] + [n for n in ACTIVATIONS if n != "softplus_beta"]   # first: its threshold is crossed


def test_legacy_exporter_drops_softplus_threshold(tmp_path):
    """Why the legacy file maps to threshold=1e30: the graph itself has no threshold."""
    net = mlp(["softplus_beta"])
    path = export(net, tmp_path / "sp.onnx", dynamo=False)
    x = states(3)
    torch_value = net.double()(torch.tensor(x)).detach().numpy()[:, 0]
    assert np.abs(ort_values(path, x) - torch_value).max() > 1e-4            # exporter, not frontend
    check_against_ort(load_onnx(path), path, x)


@pytest.mark.parametrize("opset", LEGACY_OPSETS)
def test_legacy_opset_sweep(tmp_path, opset):
    net = mlp(ALL, seed=opset)
    path = export(net, tmp_path / "all.onnx", dynamo=False, opset=opset)
    assert onnx.load(path).opset_import[0].version == opset
    ir = load_onnx(path)
    assert activations_of(ir) == [expected_activation(n, False) for n in ALL]
    check_against_torch(ir, no_threshold(net), states(3), path)


@pytest.mark.parametrize("opset", DYNAMO_OPSETS)
def test_dynamo_opset_sweep(tmp_path, opset):
    net = mlp(ALL, seed=opset)
    path = export(net, tmp_path / "all.onnx", dynamo=True, opset=opset)
    assert onnx.load(path).opset_import[0].version == opset
    ir = load_onnx(path)
    assert activations_of(ir) == [expected_activation(n, True) for n in ALL]
    x = states(3)
    check_against_torch(ir, net, x, path)
    k = 2 * ALL.index("softplus_beta")          # the threshold is crossed: both branches are compared
    z = 1.5 * net[:k + 1].double()(torch.tensor(x)).detach().numpy()
    assert (z > 3.0).any() and (z <= 3.0).any()


@pytest.fixture(scope="module")
def unoptimized(tmp_path_factory):
    """One dynamo export with optimize=False (Constant/CastLike nodes left in place)."""
    net = mlp(ALL, seed=3)
    path = export(net, tmp_path_factory.mktemp("noopt") / "all.onnx", dynamo=True, optimize=False)
    return net, path


def test_dynamo_unoptimized(unoptimized):
    net, path = unoptimized
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert {"Constant", "CastLike"} <= ops
    ir = load_onnx(path)
    assert activations_of(ir) == [expected_activation(n, True) for n in ALL]
    check_against_torch(ir, net, states(3), path)


def shuffled(path, out, seed):
    model = onnx.load(path)
    nodes, inits = list(model.graph.node), list(model.graph.initializer)
    rng = random.Random(seed)
    rng.shuffle(nodes)
    rng.shuffle(inits)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    del model.graph.initializer[:]
    model.graph.initializer.extend(inits)
    onnx.save(model, out)
    return out


@pytest.mark.parametrize("which", ["legacy", "dynamo_unoptimized"])
def test_shuffled_node_order(tmp_path, unoptimized, which):
    if which == "legacy":
        net = mlp(ALL, seed=5)
        path = export(net, tmp_path / "all.onnx", dynamo=False, opset=17)
    else:
        net, path = unoptimized
    ir = load_onnx(path)
    for seed in range(3):
        other = load_onnx(shuffled(path, tmp_path / f"shuffled{seed}.onnx", seed))
        assert [n.op_type for n in onnx.load(tmp_path / f"shuffled{seed}.onnx").graph.node] != \
               [n.op_type for n in onnx.load(path).graph.node]
        assert other.fingerprint() == ir.fingerprint()
        assert activations_of(other) == activations_of(ir)


@pytest.mark.parametrize("dynamo", [False, True])
@pytest.mark.parametrize("bias,example", [(False, (1, 3)), (True, (3,))])
def test_linear_bias_and_1d_input(tmp_path, dynamo, bias, example):
    """No bias: Gemm without C (dynamo) / MatMul (legacy); 1-D input: MatMul + Add in both orders."""
    net = mlp(["tanh", "softplus_beta"], bias=bias)
    path = export(net, tmp_path / "lin.onnx", dynamo=dynamo, example=torch.randn(*example))
    ops = [n.op_type for n in onnx.load(path).graph.node]
    assert ("Add" in ops) == bias
    ir = load_onnx(path)
    assert kinds(ir) == list("DSDSD")
    assert all(d.bias.any() == bias for d in ir.dense_layers())
    check_against_torch(ir, net if dynamo else no_threshold(net), states(3), path)


def test_dynamo_old_opset_request(tmp_path):
    """Asked for opset < 15, the dynamo exporter writes a newer opset; the file still loads."""
    net = mlp(["gelu", "softplus_beta"])
    path = export(net, tmp_path / "old.onnx", dynamo=True, opset=11)
    assert onnx.load(path).opset_import[0].version >= 15
    check_against_torch(load_onnx(path), net, states(3), path)


def test_batch_axes_and_dynamic_batch(tmp_path):
    net = mlp(["gelu", "silu"])
    rank3 = load_onnx(export(net, tmp_path / "r3.onnx", dynamo=False, example=torch.randn(2, 5, 3)))
    dyn = export(net, tmp_path / "dyn.onnx", dynamo=False, example=torch.randn(4, 3), input_names=["x"],
                 dynamic_axes={"x": {0: "batch"}})
    assert load_onnx(dyn).fingerprint() == rank3.fingerprint()
    x = states(3, count=10)
    check_against_torch(rank3, net, x)
    for path, batch in ((tmp_path / "r3.onnx", (2, 5, 3)), (dyn, (10, 3))):
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        out = sess.run(None, {sess.get_inputs()[0].name: x.reshape(batch).astype(np.float32)})[0]
        np.testing.assert_allclose(reference.value(rank3, x), out.ravel(), rtol=2e-5, atol=2e-5)


class Normalised(nn.Module):
    """Input normalisation by buffers and output scale/offset by constants around an MLP."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.1, -0.2, 0.3]))
        self.register_buffer("std", torch.tensor([2.0, 0.5, 1.5]))
        self.net = mlp(["tanh"])

    def forward(self, x):
        return 3.0 * self.net((x - self.mean) / self.std) - 0.25


@pytest.mark.parametrize("dynamo", [False, True])
def test_normalisation_and_output_scale(tmp_path, dynamo):
    module = Normalised().eval()
    path = export(module, tmp_path / "norm.onnx", dynamo=dynamo)
    ir = load_onnx(path)
    assert kinds(ir) == list("ADSDA")
    np.testing.assert_allclose(ir.layers[0].scale, 1 / np.array([2.0, 0.5, 1.5]), rtol=1e-7)
    np.testing.assert_allclose(ir.layers[-1].scale, [3.0])
    np.testing.assert_allclose(ir.layers[-1].shift, [-0.25])
    check_against_torch(ir, module, states(3), path)


def test_batchnorm(tmp_path):
    torch.manual_seed(0)
    net = nn.Sequential(nn.BatchNorm1d(3), nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ELU(), nn.Linear(4, 1))
    with torch.no_grad():
        for bn in (net[0], net[2]):
            bn.running_mean.normal_()
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.normal_()
            bn.bias.normal_()
    path = export(net.eval(), tmp_path / "bn.onnx", dynamo=False, opset=17, do_constant_folding=False)
    assert [n.op_type for n in onnx.load(path).graph.node].count("BatchNormalization") == 2
    ir = load_onnx(path)
    assert kinds(ir) == list("ADASD")
    check_against_torch(ir, net, states(3), path)


def test_double_precision_export(tmp_path):
    net = mlp(["gelu", "softplus_beta"]).double()
    path = export(net, tmp_path / "f64.onnx", dynamo=False, example=torch.randn(1, 3, dtype=torch.float64))
    ir = load_onnx(path)
    assert onnx.load(path).graph.input[0].type.tensor_type.elem_type == TensorProto.DOUBLE
    assert activations_of(ir) == [("gelu", {"approximate": 0.0}), ("softplus", {"beta": 1.5, "threshold": BIG})]
    check_against_torch(ir, no_threshold(net), states(3))     # onnxruntime has no float64 Softplus


# ---- hand-built graphs ----------------------------------------------------------------

def graph_model(nodes, inits, in_shape=(1, 3), opset=17, inputs=(), outputs=None, elem=TensorProto.FLOAT):
    dtype = np.float64 if elem == TensorProto.DOUBLE else np.float32
    initializers = [numpy_helper.from_array(v if isinstance(v, np.ndarray) and v.dtype.kind == "i"
                                            else np.asarray(v, dtype), k) for k, v in inits.items()]
    graph = helper.make_graph(nodes, "hand", [helper.make_tensor_value_info("x", elem, in_shape), *inputs],
                              outputs or [helper.make_tensor_value_info("y", elem, None)], initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    return model


def f32(a):
    return np.asarray(a, np.float32).astype(np.float64)


RNG = np.random.default_rng(42)
W34 = RNG.normal(size=(3, 4)).astype(np.float32)      # (in, out)
W41 = RNG.normal(size=(4, 1)).astype(np.float32)
B4 = RNG.normal(size=4).astype(np.float32)


def head(src="h"):
    """h (.., 4) -> Tanh -> MatMul(W41) -> y: a scalar tail for hand-built graphs."""
    return [helper.make_node("Tanh", [src], ["t"]), helper.make_node("MatMul", ["t", "w41"], ["y"])], {"w41": W41}


def tail_value(h):
    return np.tanh(h) @ f32(W41)[:, 0]


@pytest.mark.parametrize("alpha,beta,trans_b,c_shape", [
    (1.0, 1.0, 0, None), (0.5, 1.0, 1, (4,)), (2.0, 0.25, 0, (1, 4)), (1.0, -1.5, 1, ()), (1.0, 3.0, 0, (1,)),
    (0.75, 2.0, 1, (1, 1)), (1.0, 0.0, 0, (4,))])
def test_gemm_attributes(alpha, beta, trans_b, c_shape):
    w = W34.T.copy() if trans_b else W34
    c = None if c_shape is None else RNG.normal(size=c_shape).astype(np.float32)
    inputs = ["x", "w"] + ([] if c is None else ["c"])
    tail, inits = head()
    inits.update({"w": w, **({} if c is None else {"c": c})})
    model = graph_model([helper.make_node("Gemm", inputs, ["h"], alpha=alpha, beta=beta, transB=trans_b), *tail], inits)
    ir = load_onnx(model)
    x = states(3)
    h = alpha * x @ f32(W34) + (0.0 if c is None else beta * np.broadcast_to(f32(c), (1, 4)))
    np.testing.assert_allclose(reference.value(ir, x), tail_value(h), rtol=1e-12, atol=1e-12)
    check_against_ort(ir, model, x)


@pytest.mark.parametrize("order", ["x@W+b", "b+x@W"])
def test_matmul_add_orders(order):
    mm = helper.make_node("MatMul", ["x", "w"], ["m"])
    add = helper.make_node("Add", ["m", "b"] if order == "x@W+b" else ["b", "m"], ["h"])
    tail, inits = head()
    model = graph_model([add, *tail, mm], {**inits, "w": W34, "b": B4})
    ir = load_onnx(model)
    assert kinds(ir) == list("DSD")
    np.testing.assert_allclose(ir.layers[0].bias, f32(B4))
    x = states(3)
    np.testing.assert_allclose(reference.value(ir, x), tail_value(x @ f32(W34) + f32(B4)), rtol=1e-12)
    check_against_ort(ir, model, x)


def test_matmul_weight_on_the_left_and_vector_weight():
    nodes = [helper.make_node("MatMul", ["wt", "x"], ["m"]), helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("MatMul", ["r", "v"], ["y"])]
    v = RNG.normal(size=4).astype(np.float32)
    model = graph_model(nodes, {"wt": W34.T.copy(), "v": v}, in_shape=(3,))
    ir = load_onnx(model)
    x = states(3)
    np.testing.assert_allclose(reference.value(ir, x), np.maximum(x @ f32(W34), 0) @ f32(v), rtol=1e-12)
    check_against_ort(ir, model, x)


@pytest.mark.parametrize("op,const_first,c,expect", [
    ("Sub", False, [0.5, -1.0, 2.0], lambda x, c: x - c),
    ("Sub", True, 1.5, lambda x, c: c - x),
    ("Div", False, [2.0, 0.5, 4.0], lambda x, c: x / c),
    ("Mul", True, [2.0, -3.0, 0.25], lambda x, c: c * x),
    ("Add", True, [[0.1, 0.2, 0.3]], lambda x, c: c + x),
    ("Neg", False, None, lambda x, c: -x),
])
def test_affine_by_constants(op, const_first, c, expect):
    ins = ["x"] if c is None else (["c", "x"] if const_first else ["x", "c"])
    tail, inits = head()
    nodes = [helper.make_node(op, ins, ["n"]), helper.make_node("MatMul", ["n", "w"], ["h"]), *tail]
    model = graph_model(nodes, {**inits, "w": W34, **({} if c is None else {"c": c})})
    ir = load_onnx(model)
    assert kinds(ir) == list("ADSD")
    x = states(3)
    want = tail_value(expect(x, f32(c if c is not None else 0.0)) @ f32(W34))
    np.testing.assert_allclose(reference.value(ir, x), want, rtol=1e-12, atol=1e-12)
    check_against_ort(ir, model, x)


def test_constant_nodes_and_folding():
    """Weights from Constant nodes through Cast/Transpose/Reshape/Unsqueeze; unused constants ignored."""
    nodes = [
        helper.make_node("Constant", [], ["w64"], value=numpy_helper.from_array(W34.T.astype(np.float64))),
        helper.make_node("Cast", ["w64"], ["wT"], to=TensorProto.FLOAT),
        helper.make_node("Transpose", ["wT"], ["w"], perm=[1, 0]),
        helper.make_node("Constant", [], ["bflat"], value_floats=B4.tolist()),
        helper.make_node("Constant", [], ["axes"], value_ints=[0]),
        helper.make_node("Unsqueeze", ["bflat", "axes"], ["b"]),
        helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([3], np.int64))),
        helper.make_node("Constant", [], ["unused"], value_float=7.0),
        helper.make_node("Neg", ["unused"], ["unused2"]),
        helper.make_node("Reshape", ["x", "shape"], ["xr"]),
        helper.make_node("Gemm", ["xu", "w", "b"], ["h"]),
        helper.make_node("Unsqueeze", ["xr", "axes"], ["xu"]),
        helper.make_node("Constant", [], ["half"], value_float=0.5),
        helper.make_node("Mul", ["half", "y0"], ["y"]),
        helper.make_node("Tanh", ["h"], ["t"]), helper.make_node("MatMul", ["t", "w41"], ["y0"]),
        helper.make_node("Reshape", ["w41flat", "col"], ["w41"]),
    ]
    model = graph_model(nodes, {"w41flat": W41.ravel(), "col": np.array([4, 1], np.int64)}, in_shape=(1, 3))
    ir = load_onnx(model)
    assert kinds(ir) == list("DSDA")
    x = states(3)
    np.testing.assert_allclose(reference.value(ir, x), 0.5 * tail_value(x @ f32(W34) + f32(B4)), rtol=1e-12)
    check_against_ort(ir, model, x)


def test_reshape_family_that_keeps_rows():
    nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=1),
             helper.make_node("Squeeze", ["f", "ax0"], ["s"]),                 # (1,3) -> (3,)
             helper.make_node("Unsqueeze", ["s", "ax0"], ["u"]),               # (3,) -> (1,3)
             helper.make_node("Reshape", ["u", "shp"], ["r"]),                 # (1,3) -> (1,1,3)
             helper.make_node("MatMul", ["r", "w"], ["h"]), *head()[0][:1],
             helper.make_node("MatMul", ["t", "w41"], ["m"]),
             helper.make_node("Reshape", ["m", "flat"], ["y"])]                # (1,1,1) -> (1,)
    inits = {"w": W34, "w41": W41, "ax0": np.array([0], np.int64), "shp": np.array([1, -1, 3], np.int64),
             "flat": np.array([-1], np.int64)}
    model = graph_model(nodes, inits)
    ir = load_onnx(model)
    x = states(3)
    np.testing.assert_allclose(reference.value(ir, x), tail_value(x @ f32(W34)), rtol=1e-12)
    check_against_ort(ir, model, x)


def test_clip_prelu_dropout_and_attribute_forms():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Clip", ["h"], ["c"], min=-0.5, max=0.75),      # opset 10: attributes
             helper.make_node("MatMul", ["c", "w44"], ["h2"]),
             helper.make_node("Dropout", ["h2"], ["d"], ratio=0.5),
             helper.make_node("PRelu", ["d", "slope"], ["p"]),
             helper.make_node("MatMul", ["p", "w41"], ["y"])]
    w44 = RNG.normal(size=(4, 4)).astype(np.float32)
    model = graph_model(nodes, {"w": W34, "w44": w44, "w41": W41, "slope": np.array([0.3], np.float32)}, opset=10)
    ir = load_onnx(model)
    assert activations_of(ir) == [("hardtanh", {"min_val": -0.5, "max_val": 0.75}),
                                  ("leaky_relu", {"negative_slope": 0.3})]
    check_against_ort(ir, model, states(3))
    relu = graph_model([helper.make_node("Clip", ["x", "zero"], ["c"]), helper.make_node("MatMul", ["c", "w"], ["h"]),
                        *head()[0]], {"zero": 0.0, "w": W34, "w41": W41}, opset=13)
    assert activations_of(load_onnx(relu))[0] == ("relu", {})


def test_external_data(tmp_path):
    net = mlp(["silu"], hidden=64)
    path = export(net, tmp_path / "inline.onnx", dynamo=False)
    model = onnx.load(path)
    onnx.save_model(model, tmp_path / "ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.weights", size_threshold=0)
    assert (tmp_path / "ext.weights").exists()
    ir = load_onnx(tmp_path / "ext.onnx")
    assert ir.name == "ext" and ir.fingerprint() == load_onnx(path).fingerprint()
    with pytest.raises(UnsupportedOpError, match=r"tensor '0\.weight'.*external"):
        load_onnx((tmp_path / "ext.onnx").read_bytes())
    with pytest.raises(UnsupportedOpError, match="external"):
        load_onnx(onnx.load(tmp_path / "ext.onnx", load_external_data=False))
    assert load_onnx(onnx.load(tmp_path / "ext.onnx")).fingerprint() == ir.fingerprint()   # already loaded
    (tmp_path / "ext.weights").unlink()
    with pytest.raises(FileNotFoundError, match="0.weight"):
        load_onnx(tmp_path / "ext.onnx")


def test_inputs_bytes_and_names(tmp_path):
    net = mlp(["relu"])
    path = export(net, tmp_path / "my_barrier.onnx", dynamo=False)
    a, b = load_onnx(str(path)), load_onnx(path.read_bytes(), name="other")
    assert a.name == "my_barrier" and b.name == "other" and a.fingerprint() == b.fingerprint()
    assert load_onnx(onnx.load(path)).fingerprint() == a.fingerprint()
    old_style = export(net, tmp_path / "old_style.onnx", dynamo=False, keep_initializers_as_inputs=True)
    assert len(onnx.load(old_style).graph.input) > 1
    assert load_onnx(old_style).fingerprint() == a.fingerprint()


# ---- refusals -------------------------------------------------------------------------

class LSTMHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 1)

    def forward(self, x):
        return self.lstm(x)[0]


@pytest.mark.parametrize("module,example,pattern", [
    (nn.Sequential(nn.Conv1d(1, 2, 3), nn.Flatten(), nn.Linear(4, 1)), torch.randn(1, 1, 4), r"Conv node '/0/Conv'"),
    (LSTMHead(), torch.randn(1, 1, 3), r"LSTM node '/lstm/LSTM'.*recurrent"),
    (nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 1)), torch.randn(1, 3), "LayerNormalization node"),
    (nn.Sequential(nn.Linear(3, 4), nn.Softmax(dim=-1), nn.Linear(4, 1)), torch.randn(1, 3), "Softmax node"),
    (nn.Sequential(nn.Linear(3, 4), nn.Hardswish(), nn.Linear(4, 1)), torch.randn(1, 3), "HardSwish node"),
])
def test_refuses_unsupported_torch_layers(tmp_path, module, example, pattern):
    path = export(module, tmp_path / "bad.onnx", dynamo=False, opset=17, example=example)
    with pytest.raises(UnsupportedOpError, match=pattern) as info:
        load_onnx(path)
    assert "Supported: Gemm" in str(info.value)


def test_refuses_non_scalar_output(tmp_path):
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    with pytest.raises(ShapeError, match=r"shape \(1, 2\).*scalar"):
        load_onnx(export(net, tmp_path / "two.onnx", dynamo=False))


def test_refuses_multiple_outputs():
    tail, inits = head()
    model = graph_model([helper.make_node("MatMul", ["x", "w"], ["h"]), *tail], {**inits, "w": W34},
                        outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1]),
                                 helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 4])])
    with pytest.raises(ShapeError, match=r"2 outputs.*'y' \(1, 1\).*'h' \(1, 4\)"):
        load_onnx(model)


def _bad(nodes, inits, domains=(), **kw):
    model = graph_model(nodes, {"w": W34, "w41": W41, **inits}, **kw)
    model.opset_import.extend(helper.make_opsetid(d, 1) for d in domains)
    return model


MM = helper.make_node("MatMul", ["x", "w"], ["h"])
TAIL = head()[0]


@pytest.mark.parametrize("model,error,pattern", [
    (_bad([helper.make_node("MatMul", ["x", "w2"], ["h"]), *TAIL], {},
          inputs=[helper.make_tensor_value_info("w2", TensorProto.FLOAT, [3, 4])]),
     UnsupportedOpError, r"2 non-constant inputs \('x', 'w2'\).*weights must be initializers"),
    (_bad([helper.make_node("RandomNormal", [], ["r"], shape=[3, 4]),
           helper.make_node("MatMul", ["x", "r"], ["h"]), *TAIL], {}),
     UnsupportedOpError, r"input 'r' of MatMul node.*not a constant"),
    (_bad([MM, *TAIL], {"w": np.where(np.arange(12).reshape(3, 4) == 5, np.nan, W34)}),
     NonFiniteWeightError, r"constant 'w' has a non-finite value nan at index \[1, 1\]"),
    (_bad([helper.make_node("Gemm", ["x", "w"], ["h"], transA=1), *TAIL], {}), UnsupportedOpError, "transA=1"),
    (_bad([helper.make_node("Div", ["c", "x"], ["d"]), helper.make_node("MatMul", ["d", "w"], ["h"]), *TAIL],
          {"c": 2.0}), UnsupportedOpError, r"Div node.*matches no supported pattern"),
    (_bad([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
           helper.make_node("Mul", ["x", "sf"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["h"]), *TAIL], {}),
     UnsupportedOpError, r"Shape node.*dynamic"),
    (_bad([MM, helper.make_node("Reshape", ["h", "s"], ["r"]), helper.make_node("MatMul", ["r", "w22"], ["y"])],
          {"s": np.array([2, 2], np.int64), "w22": np.ones((2, 1), np.float32)}),
     ShapeError, r"Reshape node.*\(1, 4\) to \(2, 2\).*together"),
    (_bad([helper.make_node("Reshape", ["x", "flat"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["h"]), *TAIL],
          {"flat": np.array([-1], np.int64)}, in_shape=("N", 3)),
     ShapeError, r"Reshape node.*reshapes \(None, 3\) to \(None,\)"),
    (_bad([MM, helper.make_node("Sin", ["h"], ["t"]), helper.make_node("MatMul", ["t", "w41"], ["y"])], {}),
     UnsupportedOpError, r"Sin node producing 't': Sin and Cos are supported only in the periodic input embedding"),
    (_bad([MM, helper.make_node("Frob", ["h"], ["t"], domain="my.ops"),
           helper.make_node("MatMul", ["t", "w41"], ["y"])], {}, domains=["my.ops"]), UnsupportedOpError,
     r"domain 'my\.ops'"),
    (_bad([MM, helper.make_node("Relu", ["h"], ["dead"]), *TAIL], {}), UnsupportedOpError,
     r"Relu node producing 'dead' computes from the input but does not contribute"),
    (_bad([helper.make_node("RandomUniform", [], ["junk"], shape=[2]), MM, *TAIL], {}), UnsupportedOpError,
     r"RandomUniform node producing 'junk' is neither constant"),
    (_bad([MM, helper.make_node("Clip", ["h", "", "hi"], ["t"]), helper.make_node("MatMul", ["t", "w41"], ["y"])],
          {"hi": 1.0}), UnsupportedOpError, r"Clip .*only min=None / max=1.0"),
    (_bad([MM, helper.make_node("PRelu", ["h", "sl"], ["t"]), helper.make_node("MatMul", ["t", "w41"], ["y"])],
          {"sl": [0.1, 0.2, 0.3, 0.4]}), UnsupportedOpError, "per-channel"),
    (_bad([helper.make_node("Gemm", ["x", "w", "c"], ["h"]), *TAIL], {"c": np.ones((2, 4))}, in_shape=(2, 3)),
     ShapeError, r"Gemm node.*shape \(2, 4\).*batch"),
    (_bad([helper.make_node("Add", ["x", "c"], ["a"]), helper.make_node("MatMul", ["a", "w"], ["h"]), *TAIL],
          {"c": np.ones((2, 1))}, in_shape=(2, 3)), ShapeError, r"shape \(2, 1\).*per feature"),
    (_bad([MM, helper.make_node("MatMul", ["h", "w41"], ["m"]), helper.make_node("Add", ["h", "m"], ["s"]),
           helper.make_node("MatMul", ["s", "w41"], ["y"])], {}), UnsupportedOpError, "no supported pattern"),
])
def test_refusals(model, error, pattern):
    with pytest.raises(error, match=pattern):
        load_onnx(model)


def _elementwise(nodes, consts):
    """x -> MatMul(W) -> h -> nodes -> t -> MatMul(W41) -> y."""
    return graph_model([MM, *nodes, helper.make_node("MatMul", ["t", "w41"], ["y"])],
                       {"w": W34, "w41": W41, **consts})


def _gelu_erf(div):
    return [helper.make_node("Div", ["h", "k"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
            helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["h", "a"], ["m"]),
            helper.make_node("Mul", ["m", "half"], ["t"])], {"k": div, "one": 1.0, "half": 0.5}


def _softplus_where(op, thr):
    return [helper.make_node("Mul", ["h", "beta"], ["z"]), helper.make_node("Softplus", ["z"], ["s"]),
            helper.make_node("Div", ["s", "beta"], ["sd"]), helper.make_node(op, ["z", "thr"], ["c"]),
            helper.make_node("Where", ["c", "h", "sd"], ["t"])], {"beta": 2.0, "thr": thr}


def test_patterns_accept_exact_forms_and_refuse_lookalikes():
    ok = load_onnx(_elementwise(*_gelu_erf(np.float32(np.sqrt(2.0)))))
    assert activations_of(ok) == [("gelu", {"approximate": 0.0})]
    sp = _elementwise(*_softplus_where("Greater", 4.0))
    assert activations_of(load_onnx(sp)) == [("softplus", {"beta": 2.0, "threshold": 4.0})]
    check_against_ort(load_onnx(sp), sp, states(3, scale=3.0))
    with pytest.raises(UnsupportedOpError, match="matches no supported pattern"):
        load_onnx(_elementwise(*_gelu_erf(1.5)))                    # not sqrt(2)
    with pytest.raises(UnsupportedOpError, match="GreaterOrEqual node"):
        load_onnx(_elementwise(*_softplus_where("GreaterOrEqual", 4.0)))
    swish2 = [helper.make_node("Mul", ["h", "two"], ["z"]), helper.make_node("Sigmoid", ["z"], ["s"]),
              helper.make_node("Mul", ["h", "s"], ["t"])]
    with pytest.raises(UnsupportedOpError, match="matches no supported pattern"):
        load_onnx(_elementwise(swish2, {"two": 2.0}))               # x * sigmoid(2x) is not SiLU
    mismatch = [helper.make_node("Mul", ["h", "two"], ["z"]), helper.make_node("Softplus", ["z"], ["s"]),
                helper.make_node("Div", ["s", "three"], ["t"])]     # still exact, as three layers
    ir = load_onnx(_elementwise(mismatch, {"two": 2.0, "three": 3.0}))
    assert kinds(ir) == list("DASAD")
    check_against_ort(ir, _elementwise(mismatch, {"two": 2.0, "three": 3.0}), states(3))
