"""cbfsim simulate takes several starts (--x0 repeated, --x0-file) and draws them all; a bad
start file is one line naming the file and the line; the phase portrait of a 3-state plant
names its slice."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from cbfsim.cli import main, read_starts

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "experiments" / "models"


@pytest.fixture()
def work(tmp_path: Path) -> Path:
    shutil.copy(MODELS / "vdp.onnx", tmp_path / "model.onnx")
    card = json.loads((MODELS / "vdp.json").read_text())
    card["network"]["onnx"] = "model.onnx"
    (tmp_path / "model.json").write_text(json.dumps(card))
    return tmp_path


@pytest.mark.toolchain
def test_several_starts_run_in_one_batch_and_are_all_drawn(work, cxx, monkeypatch):
    import cbfsim.plots as plots
    drawn = []
    real = plots.phase_portrait
    monkeypatch.setattr(plots, "phase_portrait", lambda *a, **k: drawn.append(k) or real(*a, **k))
    (work / "starts.txt").write_text("# p, v\n0.2, -0.1\n-0.3 0.4   # spaces work too\n\n")
    code = main(["simulate", str(work / "model.json"), "--x0", "0.1,0.1", "--x0", "-0.2", "0.3",
                 "--x0-file", str(work / "starts.txt"), "--t-final", "0.2", "--dt", "0.01", "--out", str(work / "sim")])
    assert code == 0
    traj = np.load(work / "sim" / "trajectory.npz")
    assert traj["x"].shape[0] == 4
    assert np.allclose(traj["x"][:, 0], [[0.1, 0.1], [-0.2, 0.3], [0.2, -0.1], [-0.3, 0.4]])
    assert drawn and len(drawn[0]["trajectories"]) == 4 and drawn[0]["max_runs"] == 4
    names = sorted(p.name for p in (work / "sim").glob("*.png"))
    assert names == ["phase_portrait.png", "time_series.png", "time_series_1.png", "time_series_2.png",
                     "time_series_3.png"]


def test_a_bad_start_file_names_the_file_and_the_line(tmp_path):
    bad = tmp_path / "starts.txt"
    bad.write_text("0.1, 0.2\n0.3, abc\n")
    with pytest.raises(ValueError, match=r"starts.txt, line 2: expected a number, got 'abc'"):
        read_starts(bad)
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(ValueError, match="no start states"):
        read_starts(tmp_path / "empty.txt")


def test_a_start_of_the_wrong_length_is_a_usage_error_naming_it(work, capsys):
    code = None
    with pytest.raises(SystemExit) as info:
        main(["simulate", str(work / "model.json"), "--x0", "0.1,0.1", "--x0", "0.3", "--out", str(work / "sim")])
    code = info.value.code
    err = capsys.readouterr().err
    assert code == 2 and "start 2" in err and "2 numbers (x1, x2), got 1" in err
    assert not (work / "sim").exists()


def test_simulate_needs_a_start(work, capsys):
    with pytest.raises(SystemExit) as info:
        main(["simulate", str(work / "model.json")])
    assert info.value.code == 2 and "--x0" in capsys.readouterr().err


def test_a_three_state_portrait_names_the_slice_it_draws():
    from cbfsim.plots import slice_text
    from systems import get_system
    system = get_system("unicycle")
    text = slice_text(system, (0, 1), None)
    assert text.startswith("sets drawn at the slice theta = 0") and "runs projected" in text
    assert "theta = 0.5" in slice_text(system, (0, 1), [1.0, 0.0, 0.5])
    assert slice_text(get_system("van_der_pol"), (0, 1), None) == ""


def test_the_command_is_named_once_in_an_error_line(capsys):
    from compiler.cli_errors import run
    from cbfsim.preflight import UnsafeRunError

    def refuse() -> int:
        raise UnsafeRunError("simulate: x0 = [3, 3] lies outside the constraint set")
    assert run("cbfsim simulate", refuse) == 1
    err = capsys.readouterr().err.strip()
    assert err == "cbfsim simulate: error: x0 = [3, 3] lies outside the constraint set"
