"""A plant the project does not ship, end to end: the worked example (examples/own_plant/run.py)
in its fast mode trains, certifies, compiles and simulates it; then the real console scripts
compile and simulate that model with the plant defined in a file outside the repository."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "own_plant"
pytestmark = [pytest.mark.toolchain, pytest.mark.slow]


def _run(args, cwd, pythonpath, timeout=600):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pythonpath), str(ROOT)])}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_worked_example_runs_in_fast_mode_and_its_model_runs_through_the_cli_from_outside(tmp_path):
    """One training serves both halves (each half trained its own before, 8% of the suite's
    CPU time): the example's, then the console scripts rebuild the plant from the card's import
    path in a folder outside the repository."""
    result = _run([sys.executable, str(EXAMPLE / "run.py"), "--fast", "--out", str(tmp_path)], tmp_path, EXAMPLE)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["min_constraint_filtered"] >= 0 > summary["min_constraint_nominal"]
    assert summary["slack_steps"] == 0
    certificate = json.loads((tmp_path / "model" / "model.cert.json").read_text())
    assert certificate["certified"] == summary["certified"] and "claim" in certificate
    assert {"cart_barrier.hpp", "cbf_config.hpp", "cbf_system.hpp"} <= set(summary["firmware_headers"])
    for figure in ("phase_portrait.png", "time_series.png", "model/training_curves.png"):
        assert (tmp_path / figure).stat().st_size > 10_000

    card = json.loads((tmp_path / "model" / "model.json").read_text())
    assert card["system"] == "cart:Cart" and card["system_origin"] == "import"
    assert card["verification"]["passed"]

    # the plant's file alone, outside the repository: every command must find it by import path
    work = tmp_path / "elsewhere"
    (work / "userland").mkdir(parents=True)
    shutil.copy(EXAMPLE / "cart.py", work / "userland" / "cart.py")
    shutil.copytree(tmp_path / "model", work / "run")
    cbfsim = [sys.executable, "-m", "cbfsim.cli"]
    userland = work / "userland"

    build = _run(cbfsim + ["compile", "run/model.onnx", "--inputs", "1", "-o", "header"], work, userland)
    assert build.returncode == 0, build.stderr
    assert (work / "header" / "model.hpp").is_file()

    sim = _run(cbfsim + ["simulate", "run/model.json", "--x0", "-0.5", "0.0", "--t-final", "6", "--out", "sim"],
               work, userland)
    assert sim.returncode == 0, sim.stderr
    import numpy as np
    x = np.load(work / "sim" / "trajectory.npz")["x"][0]
    assert np.all(1.0 - x[:, 0] ** 2 >= 0), "the filtered cart left |p| <= p_max"
    assert x[:, 0].max() > 0.5, "the cart never approached the limit: the test would prove nothing"

    lost = _run(cbfsim + ["simulate", "run/model.json", "--x0", "-0.5", "0.0", "--out", "sim2"], work, work)
    assert lost.returncode == 1 and "cart" in lost.stderr and len(lost.stderr.strip().splitlines()) == 1, \
        "without the plant's folder on the path the card's plant must be one clear error"
