"""Bad input gets a clear error naming the problem; the command line's exit codes; nothing half-written."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn

from compiler.api import compile_model
from compiler.errors import NonFiniteWeightError, ShapeError, SmoothnessError, UnsupportedOpError
from training.architectures import mlp


@pytest.mark.parametrize("layer,pattern", [
    (nn.Conv1d(1, 1, 3), r"0 \(Conv1d\).*unsupported layer"),
    (nn.LSTM(4, 4), r"LSTM.*unsupported"),
    (nn.LayerNorm(4), r"LayerNorm.*unsupported"),
    (nn.Softmax(dim=-1), r"Softmax.*unsupported"),
    (nn.MultiheadAttention(4, 1), r"MultiheadAttention.*unsupported"),
])
def test_unsupported_torch_layers_are_named(layer, pattern):
    net = nn.Sequential(layer, nn.Linear(4, 1))
    with pytest.raises(UnsupportedOpError, match=pattern):
        compile_model(net, inputs=1)


def test_non_scalar_output():
    with pytest.raises(ShapeError, match="one scalar output.*gives 2"):
        compile_model(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)), inputs=1)


def test_dimensions_that_do_not_chain():
    with pytest.raises(ShapeError, match=r"2 \(Linear\).*expects 5 inputs but receives 4"):
        compile_model(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(5, 1)), inputs=1)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_are_named(bad):
    net = mlp([3, 4, 1], "tanh", seed=0)
    with torch.no_grad():
        net[2].weight[0, 3] = bad
    with pytest.raises(NonFiniteWeightError, match=r"layer 2 Dense \(2 \(Linear\)\): weight has a non-finite value .* at index \[0, 3\]"):
        compile_model(net, inputs=1)


@pytest.mark.parametrize("act", ["relu", "leaky_relu", "hardtanh", "elu"])
def test_second_order_refuses_non_c2_activations(act):
    with pytest.raises(SmoothnessError, match=f"{act} is not twice continuously differentiable"):
        compile_model(mlp([2, 4, 1], act, seed=0), inputs=1, order=2)


def test_batchnorm_in_training_mode():
    net = nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 1))
    with pytest.raises(UnsupportedOpError, match="training mode.*eval"):
        compile_model(net, inputs=1)


def test_batchnorm_folds_on_either_side():
    from compiler import reference
    net = nn.Sequential(nn.BatchNorm1d(2), nn.Linear(2, 6), nn.BatchNorm1d(6), nn.SiLU(), nn.Linear(6, 6),
                        nn.SiLU(), nn.BatchNorm1d(6), nn.Linear(6, 1), nn.Dropout(0.3)).double()
    for bn in (net[0], net[2], net[6]):
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.data.normal_()
        bn.bias.data.normal_()
    net.eval()
    model = compile_model(net, inputs=1).model
    assert [type(layer).__name__ for layer in model.layers] == ["Dense", "Activation", "Dense", "Activation", "Dense"]
    x = np.random.default_rng(0).normal(size=(50, 2))
    np.testing.assert_allclose(reference.value(model, x), net(torch.tensor(x)).detach().numpy()[:, 0], rtol=1e-12)


@pytest.mark.parametrize("name", ["1abc", "a-b", "namespace", "double__underscore", "_x", "std"])
def test_invalid_names_are_refused(name):
    with pytest.raises(ValueError, match="not a valid C\\+\\+ identifier"):
        compile_model(mlp([2, 3, 1]), inputs=1, name=name)


def test_python_api_refuses_pickles(tmp_path):
    path = tmp_path / "model.pt"
    torch.save(mlp([2, 3, 1]), path)
    with pytest.raises(UnsupportedOpError, match="only ONNX files.*never pickles"):
        compile_model(str(path), inputs=1)


def _export(net, path, n):
    torch.onnx.export(net, (torch.zeros(1, n),), str(path), dynamo=False)


def _cbfc(*args):
    return subprocess.run([sys.executable, "-m", "compiler.cli", *map(str, args)], capture_output=True, text=True)


def test_cli_compiles_onnx_and_reports(tmp_path):
    _export(mlp([4, 32, 32, 1], "relu", seed=1), tmp_path / "bike.onnx", 4)
    result = _cbfc(tmp_path / "bike.onnx", "--inputs", 2, "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "bike.hpp").is_file() and (tmp_path / "out" / "bike_abi.cpp").is_file()
    for text in ("C_f = 2432", "C_df = 4799", "(m+1) C_df = 14397", "= 4817", "workspace 512 bytes"):
        assert text in result.stdout, result.stdout


def test_cli_usage_errors_exit_2(tmp_path):
    _export(mlp([2, 4, 1]), tmp_path / "m.onnx", 2)
    assert _cbfc(tmp_path / "m.onnx", "-o", tmp_path).returncode == 2                      # no --inputs
    bad_name = _cbfc(tmp_path / "m.onnx", "--inputs", 1, "--name", "9lives", "-o", tmp_path)
    assert bad_name.returncode == 2 and "valid C++ identifier" in bad_name.stderr
    torch.save(mlp([2, 3, 1]), tmp_path / "m.pt")
    pickle = _cbfc(tmp_path / "m.pt", "--inputs", 1, "-o", tmp_path)
    assert pickle.returncode == 2 and "ONNX files only" in pickle.stderr
    assert _cbfc(tmp_path / "missing.onnx", "--inputs", 1, "-o", tmp_path).returncode == 2


def test_cli_model_errors_exit_1_and_write_nothing(tmp_path):
    _export(mlp([2, 4, 1], "relu"), tmp_path / "relu.onnx", 2)
    out = tmp_path / "out"
    result = _cbfc(tmp_path / "relu.onnx", "--inputs", 1, "--order", 2, "-o", out)
    assert result.returncode == 1
    assert "not twice continuously differentiable" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists() or not any(out.iterdir())
