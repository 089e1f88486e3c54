"""Barriers whose state has more than one axis: a (batch, 2, 3) input flattened by nn.Flatten,
x.view(x.size(0), -1) (Shape/Gather/Unsqueeze/Concat/Reshape with a dynamic batch) or reshape,
through both ONNX exporters and the torch frontend. The state is the C-order flattening, kStateDim
the product, and h, L_f h, L_G h of the compiled header match torch float64 autograd on the
original multi-axis model with f, G given on the flattened state."""
from __future__ import annotations

import contextlib
import copy
import io
import warnings

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from compiler.errors import ShapeError, UnsupportedOpError
from compiler.frontend_onnx import load_onnx
from compiler.frontend_torch import load_torch

SHAPE = (2, 3)
N, M = 6, 2


class Agents(nn.Module):
    """Two agents of three features: an optional shared per-agent encoder, a flattening, an MLP."""

    def __init__(self, flatten: str, encoder: bool = False, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.flatten = flatten
        self.encoder = nn.Sequential(nn.Linear(3, 4), nn.Tanh()) if encoder else None
        width = 8 if encoder else N
        self.head = nn.Sequential(nn.Linear(width, 5), nn.Softplus(), nn.Linear(5, 1))

    def forward(self, x):
        if self.encoder is not None:
            x = self.encoder(x)
        if self.flatten == "flatten":
            x = nn.Flatten()(x)
        elif self.flatten == "view":
            x = x.view(x.size(0), -1)
        else:
            x = x.reshape(-1, x.shape[1] * x.shape[2])
        return self.head(x)


def export(module: nn.Module, path, dynamo: bool):
    example = (torch.randn(4, *SHAPE),)
    kwargs = ({"dynamic_shapes": ({0: torch.export.Dim("batch")},)} if dynamo
              else {"input_names": ["x"], "dynamic_axes": {"x": {0: "batch"}}})
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), example, str(path), dynamo=dynamo, **kwargs)
    return path


def torch_lie(module: nn.Module, x: np.ndarray, f: np.ndarray, G: np.ndarray):
    """h, L_f h, L_G h by float64 autograd on the multi-axis model; f, G on the flattened state."""
    ref = copy.deepcopy(module).double().eval()
    xt = torch.tensor(x.reshape(len(x), *SHAPE), requires_grad=True)
    h = ref(xt).reshape(len(x))
    grad = torch.autograd.grad(h.sum(), xt)[0].numpy().reshape(len(x), N)
    return h.detach().numpy(), np.einsum("bn,bn->b", grad, f), np.einsum("bn,bnm->bm", grad, G)


def check_compiled(source, module: nn.Module, **kwargs):
    from cbfsim.runtime import compile_barrier
    barrier = compile_barrier(source, inputs=M, dtype="double", **kwargs)
    assert barrier.n == N and "constexpr int kStateDim = 6;" in barrier.header_path.read_text()
    rng = np.random.default_rng(3)
    x, f, G = rng.normal(size=(16, N)) * 2, rng.normal(size=(16, N)), rng.normal(size=(16, N, M))
    got, want = barrier.lie(x, f, G), torch_lie(module, x, f, G)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11)


@pytest.mark.toolchain
@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
@pytest.mark.parametrize("flatten", ["flatten", "view", "reshape"])
def test_multi_axis_state_compiles_as_its_c_order_flattening(flatten, dynamo, tmp_path, cxx):
    module = Agents(flatten, encoder=flatten == "view")
    path = export(module, tmp_path / f"{flatten}.onnx", dynamo)
    assert load_onnx(path).input_dim == N
    check_compiled(str(path), module)


@pytest.mark.toolchain
def test_torch_frontend_takes_the_state_shape_from_the_caller(cxx):
    torch.manual_seed(1)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Flatten(), nn.Linear(8, 5), nn.Softplus(), nn.Linear(5, 1))
    check_compiled(net, net, state_shape=SHAPE)
    assert load_torch(net, state_shape=SHAPE).widths() == [6, 8, 5, 1]


def test_torch_frontend_refuses_flattening_the_batch_axis():
    net = nn.Sequential(nn.Flatten(0), nn.Linear(6, 1))
    with pytest.raises(UnsupportedOpError, match=r"0 \(Flatten\): start_dim=0 merges the batch axis"):
        load_torch(net, state_shape=SHAPE)


def reshape_graph(target: np.ndarray, in_shape=("N", 2, 3), transpose: bool = False):
    """x -> [Transpose(0, 2, 1)] -> Reshape(target) -> MatMul(6 -> 1)."""
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1])] if transpose else []
    nodes += [helper.make_node("Reshape", ["xt" if transpose else "x", "shape"], ["r"]),
              helper.make_node("MatMul", ["r", "w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(np.asarray(target, np.int64), "shape"),
                                           numpy_helper.from_array(np.ones((6, 1), np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_reshape_to_the_flattened_state_is_accepted():
    assert load_onnx(reshape_graph([-1, 6])).input_dim == 6
    assert load_onnx(reshape_graph([0, -1])).input_dim == 6


@pytest.mark.parametrize("target,in_shape", [
    ([2, -1], ("N", 2, 3)),          # batch and states mixed on both axes
    ([-1, 6], (4, 3)),               # 4 states of 3 regrouped into 2 rows of 6
    ([3, -1], (2, 2, 3)),
])
def test_reshapes_that_mix_states_across_the_batch_are_refused(target, in_shape):
    with pytest.raises(ShapeError, match=r"Reshape node.*does not keep the 3 features of each state together"):
        load_onnx(reshape_graph(target, in_shape))


def test_flattening_that_reorders_features_is_refused():
    with pytest.raises(UnsupportedOpError, match=r"Transpose node producing 'xt': op Transpose is not supported"):
        load_onnx(reshape_graph([-1, 6], transpose=True))
