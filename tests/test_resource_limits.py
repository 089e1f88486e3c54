"""Resource bombs are refused before anything big is allocated, in one line naming the limit,
the node and the flag; every limit can be raised. The two hostile files of issue 11 (a 1 KB
chain of self-Concats folding to 2^28 elements, a 480 KB Mul broadcast asking for 13.4 GiB)
are also compiled in a subprocess under a 1.5 GB address-space limit, so a regression fails
with MemoryError instead of exhausting the machine."""
from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch.nn as nn
from onnx import TensorProto, helper, numpy_helper

from compiler.api import compile_model
from compiler.errors import LimitExceededError, ShapeError
from compiler.frontend_onnx import load_onnx
from compiler.limits import Limits

ADDRESS_SPACE = 1536 * 2 ** 20
BIN = Path(sys.executable).parent
W31 = np.array([[0.5], [-1.0], [2.0]], np.float32)


def barrier(nodes, inits, in_shape=(1, 3)) -> onnx.ModelProto:
    """x (1, 3) -> MatMul(w) -> h (1, 1) -> nodes -> y."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), *nodes], "hostile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in {"w": W31, **inits}.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def concat_bomb(doublings: int = 28) -> onnx.ModelProto:
    """y = h + c_28, c_{k+1} = Concat(c_k, c_k): 2^28 elements when folded."""
    nodes = [helper.make_node("Concat", [f"c{k}", f"c{k}"], [f"c{k + 1}"], axis=0) for k in range(doublings)]
    return barrier([*nodes, helper.make_node("Add", ["h", f"c{doublings}"], ["y"])],
                   {"c0": np.ones(1, np.float32)})


def mul_bomb(n: int = 60_000, data_path: bool = False) -> onnx.ModelProto:
    """A (n, 1) times B (1, n): n^2 float32 = 13.4 GiB for n = 60000, from a 480 KB file.
    Folded as a constant, or (``data_path``) applied to the data one factor at a time."""
    inits = {"a": np.ones((n, 1), np.float32), "b": np.ones((1, n), np.float32)}
    if data_path:
        return barrier([helper.make_node("Mul", ["h", "a"], ["ha"]), helper.make_node("Mul", ["ha", "b"], ["y"])],
                       inits)
    return barrier([helper.make_node("Mul", ["a", "b"], ["ab"]), helper.make_node("Add", ["h", "ab"], ["y"])],
                   inits)


def concat_weights(width: int) -> onnx.ModelProto:
    """A legal model whose (width, 1) weight is folded from a Concat of two halves."""
    half = np.linspace(-1, 1, width // 2, dtype=np.float32).reshape(-1, 1)
    graph = helper.make_graph(
        [helper.make_node("Concat", ["w1", "w2"], ["w"], axis=0), helper.make_node("MatMul", ["x", "w"], ["y"])],
        "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, width))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 1))],
        initializer=[numpy_helper.from_array(half, "w1"), numpy_helper.from_array(-half, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_hostile_files_are_the_size_the_issue_reports():
    assert len(concat_bomb().SerializeToString()) < 1300
    assert 470_000 < len(mul_bomb().SerializeToString()) < 490_000


def test_self_concat_chain_is_refused_at_the_folding_limit_naming_node_and_flag():
    with pytest.raises(LimitExceededError) as info:
        load_onnx(concat_bomb())
    message = str(info.value)
    assert "\n" not in message
    assert "Concat node producing 'c" in message and "max_folded_elements" in message
    assert "--max-folded-elements" in message


def test_constant_mul_broadcast_is_refused_before_numpy_allocates_it():
    with pytest.raises(LimitExceededError, match=r"Mul node producing 'ab'.*3,600,000,000 elements.*"
                                                 r"--max-folded-elements"):
        load_onnx(mul_bomb())


def test_mul_broadcast_on_the_data_path_is_refused_before_numpy_allocates_it():
    with pytest.raises(ShapeError, match=r"Mul node producing 'y'.*\(60000, 1\) and \(1, 60000\).*per feature"):
        load_onnx(mul_bomb(data_path=True))


def test_folding_limit_is_a_keyword_and_counts_every_folded_element():
    model = concat_weights(64)
    assert load_onnx(model).input_dim == 64
    with pytest.raises(LimitExceededError, match=r"Concat node producing 'w' needs 64 elements.*limit of 63"):
        load_onnx(model, limits=Limits(max_folded_elements=63))
    load_onnx(model, limits=Limits(max_folded_elements=64))


def test_merging_two_thin_linear_layers_is_checked_before_forming_the_product():
    wide = 300            # 900 weights that merge into a 300 x 300 product
    net = nn.Sequential(nn.Linear(wide, 1), nn.Linear(1, wide), nn.Tanh(), nn.Linear(wide, 1))
    with pytest.raises(LimitExceededError, match=r"merging 0 \(Linear\) and 1 \(Linear\).*90,000 weights.*"
                                                 r"--max-weights"):
        compile_model(net, inputs=1, limits=Limits(max_weights=80_000))
    assert compile_model(net, inputs=1).model.widths() == [wide, wide, 1]


def test_total_weights_and_workspace_limits_name_their_flags():
    net = nn.Sequential(nn.Linear(3, 40), nn.Tanh(), nn.Linear(40, 40), nn.Tanh(), nn.Linear(40, 1))
    compiled = compile_model(net, inputs=2)
    weights = 3 * 40 + 40 + 40 * 40 + 40 + 40 + 1
    with pytest.raises(LimitExceededError, match=rf"needs {weights:,} weights.*--max-weights"):
        compile_model(net, inputs=2, limits=Limits(max_weights=weights - 1))
    workspace = compiled.report.workspace_bytes
    with pytest.raises(LimitExceededError, match=rf"workspace of 'model'.*needs {workspace:,} bytes.*"
                                                 r"--max-workspace-bytes"):
        compile_model(net, inputs=2, limits=Limits(max_workspace_bytes=workspace - 1))
    compile_model(net, inputs=2, limits=Limits(max_workspace_bytes=workspace))


def test_a_declared_state_wider_than_the_weight_limit_is_refused_before_any_array():
    model = barrier([helper.make_node("Identity", ["h"], ["y"])], {}, in_shape=(1, 10 ** 12))
    with pytest.raises(LimitExceededError, match=r"input 'x'.*1,000,000,000,000 weights"):
        load_onnx(model)


def run_limited(argv: list[str], tmp_path: Path) -> tuple[int, str, float, float]:
    """Run a command under the address-space limit: exit code, stderr, wall seconds, peak RSS MB."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    err_path = tmp_path / "stderr.txt"
    start = time.perf_counter()
    with open(err_path, "wb") as err, open(os.devnull, "wb") as out:
        import subprocess
        proc = subprocess.Popen(argv, stdout=out, stderr=err, preexec_fn=limit)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, err_path.read_text(), time.perf_counter() - start, usage.ru_maxrss / 1024


@pytest.mark.parametrize("bomb", [concat_bomb, mul_bomb])
def test_bombs_are_refused_by_cbfc_under_a_1_5_gb_address_space(bomb, tmp_path):
    path = tmp_path / "bomb.onnx"
    onnx.save(bomb(), path)
    code, stderr, seconds, rss = run_limited([str(BIN / "cbfc"), str(path), "--inputs", "1",
                                              "-o", str(tmp_path / "out")], tmp_path)
    print(f"\n{bomb.__name__}: {path.stat().st_size} bytes, exit {code}, {seconds:.2f} s, peak RSS {rss:.0f} MB")
    assert code == 1, stderr
    assert len(stderr.strip().splitlines()) == 1 and "--max-folded-elements" in stderr, stderr
    assert not (tmp_path / "out").exists()
