"""Files that are not ONNX models (truncated, random, empty, zero-filled, a recursive local
function, a checker failure) give ModelFormatError in the API and one line with exit 1 in
every entry point that reads a model, through the real console scripts, leaving no files."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.api import compile_model
from compiler.errors import ModelFormatError

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CARD = ROOT / "experiments" / "models" / "vdp.json"


def good_model(functions=(), nodes=None, domains=()) -> onnx.ModelProto:
    """x (1, 2) -> MatMul -> y (1, 1), like the vdp barrier's input."""
    graph = helper.make_graph(nodes or [helper.make_node("MatMul", ["x", "w"], ["y"])], "m",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
                              initializer=[numpy_helper.from_array(np.ones((2, 1), np.float32), "w")])
    opsets = [helper.make_opsetid("", 17), *(helper.make_opsetid(d, 1) for d in domains)]
    return helper.make_model(graph, opset_imports=opsets, functions=list(functions), ir_version=9)


def recursive_function() -> bytes:
    """A model-local function that calls itself (inlining it would never end)."""
    call = helper.make_node("f", ["a"], ["b"], domain="local")
    fn = helper.make_function("local", "f", ["a"], ["b"], [call],
                              [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    nodes = [helper.make_node("f", ["x"], ["h"], domain="local"), helper.make_node("MatMul", ["h", "w"], ["y"])]
    return good_model([fn], nodes, domains=["local"]).SerializeToString()


def checker_failure() -> bytes:
    """Parses, but an initializer declares 2 x 10^6 floats and holds 8 bytes."""
    model = good_model()
    model.graph.initializer[0].dims[:] = [2, 1_000_000]
    return model.SerializeToString()


GOOD = good_model().SerializeToString()
FILES = {
    "truncated": GOOD[:len(GOOD) // 2],
    "random": np.random.default_rng(0).bytes(4096),
    "empty": b"",
    "zeros": bytes(4096),
    "recursive_function": recursive_function(),
    "checker_failure": checker_failure(),
}


@pytest.mark.parametrize("kind", FILES)
def test_api_raises_model_format_error(kind, tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(FILES[kind])
    for source in (path, FILES[kind]):
        with pytest.raises(ModelFormatError, match=r"^not an ONNX model \(.+\)$"):
            compile_model(source, inputs=1)


def prepare(tmp_path: Path, data: bytes) -> Path:
    """model.onnx holding ``data`` and a model card model.json naming it (the vdp card)."""
    tmp_path.mkdir()
    card = json.loads(CARD.read_text())
    card["network"]["onnx"] = "model.onnx"
    (tmp_path / "model.json").write_text(json.dumps(card))
    (tmp_path / "model.onnx").write_bytes(data)
    return tmp_path


COMPILE_BARRIER = "from cbfsim.runtime import compile_barrier; compile_barrier('model.onnx', inputs=1)"
ENTRY_POINTS = {
    "cbfc": [str(BIN / "cbfc"), "model.onnx", "--inputs", "1", "-o", "out"],
    "cbfsim compile": [str(BIN / "cbfsim"), "compile", "model.onnx", "--inputs", "1", "-o", "out"],
    "cbfsim verify": [str(BIN / "cbfsim"), "verify", "model.onnx", "model.json", "--samples", "100"],
    "cbfsim simulate": [str(BIN / "cbfsim"), "simulate", "model.json", "--x0", "0.1", "0.1", "--out", "out"],
    "compile_barrier": [sys.executable, "-c",
                        f"import sys\ntry:\n    {COMPILE_BARRIER}\nexcept Exception as e:\n"
                        "    print(f'{type(e).__name__}: {e}', file=sys.stderr); sys.exit(1)"],
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("kind", FILES)
def test_entry_points_print_one_line_and_exit_1(kind, entry, tmp_path):
    folder = prepare(tmp_path / "work", FILES[kind])
    cache = tmp_path / "cache"
    before = sorted(folder.rglob("*"))
    env = {**os.environ, "CBFSIM_CACHE": str(cache), "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    result = subprocess.run(ENTRY_POINTS[entry], cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1 and "not an ONNX model (" in lines[0], result.stderr
    if entry == "compile_barrier":
        assert lines[0].startswith("ModelFormatError: ")
    assert sorted(folder.rglob("*")) == before
    assert not cache.exists() or not any(cache.rglob("*"))
