"""Hostile ONNX graphs: long chains load without recursion and in time linear in the node
count (counted in Python function calls, not timed), and a weight that is not numbers is
refused in one line naming the tensor and the node that reads it."""
from __future__ import annotations

import cProfile
import pstats
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler import reference
from compiler.errors import UnsupportedOpError
from compiler.frontend_onnx import load_onnx
from compiler.onnx_graph import MAX_EXPR_DEPTH

ROOT = Path(__file__).resolve().parents[1]
W = np.array([[0.75], [-1.5]], dtype=np.float32)


def _model(nodes, inits=()):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])
    graph = helper.make_graph(nodes, "chain", [x], [y], [numpy_helper.from_array(W, "W"), *inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def constant_chain(op: str, count: int):
    """y = x @ op^count(W): the weight passes through ``count`` constant nodes."""
    nodes = [helper.make_node(op, ["W" if i == 0 else f"w{i - 1}"], [f"w{i}"]) for i in range(count)]
    return _model(nodes + [helper.make_node("MatMul", ["x", f"w{count - 1}"], ["y"])])


def data_chain(op: str, count: int):
    """y = op^count(x @ W): ``count`` nodes on the data path, each its own segment."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["t0"])]
    nodes += [helper.make_node(op, [f"t{i}"], [f"t{i + 1}"]) for i in range(count)]
    return _model(nodes + [helper.make_node("Identity", [f"t{count}"], ["y"])])


def deep_segment(count: int):
    """y = Neg^count(t) + t with t = x @ W: one segment ``count`` + 2 ops deep (t stays live)."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["t0"])]
    nodes += [helper.make_node("Neg", [f"t{i}"], [f"t{i + 1}"]) for i in range(count)]
    return _model(nodes + [helper.make_node("Add", [f"t{count}", "t0"], ["y"])])


STATES = np.array([[0.3, -0.7], [1.25, 2.0], [-4.0, 0.5]])


def _h(model) -> np.ndarray:
    return reference.value(load_onnx(model), STATES).reshape(-1)


@pytest.mark.parametrize("op,count,sign", [("Neg", 600, 1.0), ("Neg", 601, -1.0), ("Identity", 600, 1.0)])
def test_a_chain_of_600_constant_nodes_loads_without_recursion_and_computes_the_function(op, count, sign):
    assert np.array_equal(_h(constant_chain(op, count)), sign * (STATES @ W.astype(np.float64)).reshape(-1))


@pytest.mark.parametrize("make,op,sign", [(constant_chain, "Neg", 1.0), (constant_chain, "Identity", 1.0),
                                          (data_chain, "Identity", 1.0), (data_chain, "Neg", 1.0)],
                         ids=["const-neg", "const-identity", "data-identity", "data-neg"])
def test_a_chain_of_20000_nodes_loads_without_recursion(make, op, sign):
    assert np.array_equal(_h(make(op, 20000)), sign * (STATES @ W.astype(np.float64)).reshape(-1))


def _python_calls(model) -> int:
    profile = cProfile.Profile()
    profile.runcall(load_onnx, model)
    return sum(stat[1] for stat in pstats.Stats(profile).stats.values())     # total calls, recursive ones too


@pytest.mark.parametrize("make", [data_chain, constant_chain], ids=["data", "const"])
def test_loading_an_identity_chain_takes_python_calls_linear_in_its_length(make):
    """The old dependency sort rescanned every waiting node after each wave: 3,000 Identity
    nodes made 9 million generator calls. Doubling the chain must about double the work."""
    small, large = _python_calls(make("Identity", 1500)), _python_calls(make("Identity", 3000))
    assert large <= 2.2 * small, (small, large)


def test_a_segment_as_deep_as_the_matcher_reads_compiles_and_a_deeper_one_is_refused_in_one_line():
    ok = deep_segment(MAX_EXPR_DEPTH - 2)              # MatMul, the Negs and the Add
    expected = (STATES @ W.astype(np.float64)).reshape(-1) * (1 + (-1) ** (MAX_EXPR_DEPTH - 2))
    assert np.array_equal(_h(ok), expected)
    with pytest.raises(UnsupportedOpError, match=rf"\d+ ops after 'x' .* at most {MAX_EXPR_DEPTH} such ops") as err:
        load_onnx(deep_segment(20000))
    assert "\n" not in str(err.value)


def string_weight(op: str, values=(b"1.0", b"2.0")):
    w = helper.make_tensor("Wstr", TensorProto.STRING, [2, 1], list(values))
    return _model([helper.make_node(op, ["x", "Wstr"], ["y"], name="dense0")], [w])


@pytest.mark.parametrize("op", ["MatMul", "Gemm", "Add", "Mul"])
@pytest.mark.parametrize("values", [(b"1.0", b"2.0"), (b"abc", b"\xff")], ids=["numeric-text", "garbage"])
def test_a_string_typed_weight_is_refused_in_one_line_naming_the_tensor_and_the_node(op, values):
    with pytest.raises(UnsupportedOpError, match=rf"initializer 'Wstr', read by {op} node 'dense0', has element type "
                                                 r"STRING; weights must be numbers") as err:
        load_onnx(string_weight(op, values))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("model", [lambda: string_weight("MatMul", (b"abc", b"\xff")),
                                   lambda: constant_chain("Neg", 600), lambda: deep_segment(2000)],
                         ids=["string-weight", "neg-chain", "deep"])
def test_cbfc_gives_one_line_and_no_traceback_on_hostile_graphs(tmp_path, model):
    import onnx
    path = tmp_path / "hostile.onnx"
    onnx.save(model(), path)
    run = subprocess.run([sys.executable, "-m", "compiler.cli", str(path), "--inputs", "1", "-o", str(tmp_path / "o")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert "Traceback" not in run.stderr and "RecursionError" not in run.stderr
    if run.returncode:
        assert run.returncode == 1 and len(run.stderr.strip().splitlines()) == 1, run.stderr
