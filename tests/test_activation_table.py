"""compiler/activations.py is the one activation table: every consumer covers exactly its keys
(the C++ bodies, the training names and config checks, the test networks, both frontends)."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.activations import ACTIVATIONS, preset
from compiler.ir import Activation

TABLE = set(ACTIVATIONS)
TRAINED = {kind for kind, spec in ACTIVATIONS.items() if spec.presets}


def _kinds(model) -> list[tuple[str, dict]]:
    return [(layer.kind, dict(layer.params)) for layer in model.layers if isinstance(layer, Activation)]


def test_cpp_activations_lower_exactly_the_table_kinds():
    from compiler.cpp_activations import activation_body
    lowered = set()
    for kind, spec in ACTIVATIONS.items():
        for order in (1, 2) if spec.smooth else (1,):
            body = activation_body(kind, dict(spec.defaults), "float", order)
            assert body[-1] == "return y;" and any(line.startswith("d1 =") for line in body)
            assert (order == 2) == any(line.startswith("d2 =") for line in body)
        lowered.add(kind)
    assert lowered == TABLE


def test_training_names_and_torch_modules_cover_exactly_the_trainable_kinds():
    from compiler.frontend_torch import load_torch
    from training.architectures import ACTIVATION_NAMES, mlp
    seen = set()
    for name in ACTIVATION_NAMES:
        spec, params = preset(name)
        kinds = _kinds(load_torch(mlp([2, 3, 1], name, seed=0)))
        assert kinds == [(spec.kind, {**spec.defaults, **params})], name
        seen.add(spec.kind)
    assert seen == TRAINED and TRAINED == TABLE - {"identity"}


def test_config_refuses_order_two_for_exactly_the_non_smooth_names():
    from systems import get_system
    from training.architectures import ACTIVATION_NAMES
    from training.config import PIECEWISE_LINEAR, ConfigError, TrainConfig
    pend = get_system("inverted_pendulum")
    refused = set()
    for name in ACTIVATION_NAMES:
        try:
            TrainConfig(system="inverted_pendulum", order=2, activation=name, input_mask=[0]).resolve(pend)
        except ConfigError as exc:
            assert "not twice continuously differentiable" in str(exc) and preset(name)[0].not_smooth in str(exc)
            refused.add(preset(name)[0].kind)
    assert refused == {kind for kind in TRAINED if not ACTIVATIONS[kind].smooth}
    assert {preset(name)[0].kind for name in PIECEWISE_LINEAR} == {
        kind for kind in TRAINED if ACTIVATIONS[kind].piecewise_linear}


def test_order_two_elu_config_is_refused_before_training():
    from systems import get_system
    from training.config import ConfigError, TrainConfig
    with pytest.raises(ConfigError, match="'elu' is not twice continuously differentiable .*jumps at 0"):
        TrainConfig(system="inverted_pendulum", order=2, activation="elu", input_mask=[0]).resolve(
            get_system("inverted_pendulum"))


@pytest.mark.parametrize("order", [1, 2])
def test_all_activations_test_network_uses_every_trainable_kind(order):
    from compiler.frontend_torch import load_torch
    from tests.conftest import all_activations_net
    kinds = {kind for kind, _ in _kinds(load_torch(all_activations_net(order, inputs=2)))}
    assert kinds == {kind for kind in TRAINED if order == 1 or ACTIVATIONS[kind].smooth}


def test_torch_frontend_reads_back_every_kind_and_its_params():
    import torch

    from compiler.frontend_torch import load_torch
    read = set()
    for kind, spec in ACTIVATIONS.items():
        params = {key: value + 0.25 if key != "approximate" else 1.0 for key, value in spec.defaults.items()}
        net = torch.nn.Sequential(torch.nn.Linear(2, 3), spec.torch_module(params), torch.nn.Linear(3, 1))
        kinds = _kinds(load_torch(net))
        if kind == "identity":   # nn.Identity is a no-op the frontend drops
            assert kinds == []
        else:
            assert kinds == [(kind, params)]
        read.add(kind)
    assert read == TABLE


def _onnx_net(op: str):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=(2, 3)).astype(np.float32), "W1"),
             numpy_helper.from_array(rng.normal(size=(3,)).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.normal(size=(3, 1)).astype(np.float32), "W2"),
             numpy_helper.from_array(np.zeros(1, np.float32), "b2"),
             numpy_helper.from_array(np.array(-1.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(2.0, np.float32), "hi")]
    act_inputs = ["h1", "lo", "hi"] if op == "Clip" else ["h1"]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["h1"]),
             helper.make_node(op, act_inputs, ["a1"]), helper.make_node("MatMul", ["a1", "W2"], ["m2"]),
             helper.make_node("Add", ["m2", "b2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])], inits)
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString()


def test_onnx_frontend_maps_every_table_onnx_op_to_its_kind():
    from compiler.frontend_onnx import SIMPLE, load_onnx
    ops = {spec.onnx_op: kind for kind, spec in ACTIVATIONS.items() if spec.onnx_op}
    assert set(SIMPLE.items()) <= set(ops.items())
    mapped = {}
    for op, kind in ops.items():
        kinds = _kinds(load_onnx(_onnx_net(op)))
        assert [k for k, _ in kinds] == [kind], op
        mapped[op] = kind
    assert mapped == ops and set(ops.values()) <= TABLE
