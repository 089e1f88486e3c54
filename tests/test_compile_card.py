"""``cbfsim compile`` knows the plant when a model card sits beside the ONNX file or is given
with --card: it refuses more inputs than the plant has, and takes m from it by default."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cbfsim.cli import main
from training.model_card import load_card

MODELS = Path(__file__).resolve().parents[1] / "experiments" / "models"


@pytest.fixture
def shipped(tmp_path) -> Path:
    """A trained model as shipped: ONNX file and model card side by side."""
    for name in ("vdp.onnx", "vdp.json"):
        shutil.copy(MODELS / name, tmp_path / name)
    return tmp_path / "vdp.onnx"


def _exit_code(argv) -> int:
    """The command's exit status: usage errors leave through argparse's SystemExit(2)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


def test_cbfsim_compile_refuses_more_inputs_than_the_plant_beside_the_model_has(shipped, tmp_path, capsys):
    m = len(load_card(MODELS / "vdp.json").input_names)
    assert _exit_code(["compile", str(shipped), "--inputs", str(m + 2), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--inputs {m + 2}" in err and "van_der_pol" in err
    assert not (tmp_path / "out").exists()


def test_cbfsim_compile_refuses_more_inputs_than_the_plant_of_an_explicit_card_has(tmp_path, capsys):
    onnx = tmp_path / "barrier.onnx"
    shutil.copy(MODELS / "vdp.onnx", onnx)
    argv = ["compile", str(onnx), "--card", str(MODELS / "vdp.json"), "--inputs", "3", "-o", str(tmp_path / "out")]
    assert _exit_code(argv) == 2 and not (tmp_path / "out").exists()
    assert "more than the 1 input(s)" in capsys.readouterr().err


@pytest.mark.toolchain
def test_cbfsim_compile_takes_the_number_of_inputs_from_the_card(shipped, tmp_path):
    assert main(["compile", str(shipped), "-o", str(tmp_path / "out")]) == 0
    m = len(load_card(MODELS / "vdp.json").input_names)
    assert f"constexpr int kInputDim = {m};" in (tmp_path / "out" / "vdp.hpp").read_text()
