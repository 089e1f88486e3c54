"""A control period beyond what the reach computation handles is refused up front in one line
(``cbfsim certify --dt 1e9`` used to split boxes for hours), with the longest period that works."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from training.certify.problem import CertifyError, _closes, load_problem

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "experiments" / "models"


@pytest.mark.parametrize("dt", [1e9, 1e300, 50.0])
def test_a_period_whose_tube_cannot_close_is_refused_in_one_line_naming_the_longest_that_works(dt):
    with pytest.raises(CertifyError, match=r"--dt .* s is too long for the reach computation: .* up to about "
                                           r"[\d.]+ s") as err:
        load_problem(MODELS / "vdp.onnx", MODELS / "vdp.json", dt=dt)
    assert "\n" not in str(err.value)


def test_the_longest_period_named_is_where_the_tube_stops_closing():
    with pytest.raises(CertifyError) as err:
        load_problem(MODELS / "vdp.onnx", MODELS / "vdp.json", dt=1e9)
    longest = float(re.search(r"up to about ([\d.]+) s", str(err.value)).group(1))
    problem = load_problem(MODELS / "vdp.onnx", MODELS / "vdp.json", dt=longest * 0.9)   # accepted
    lo, hi = problem.lo, problem.hi
    centre, half = (lo + hi) / 2, (hi - lo) / 4
    points = np.vstack([centre, centre + np.array([[-1, -1], [-1, 1], [1, -1], [1, 1]]) * half])
    assert _closes(problem.plant, points, problem.u_lo, problem.u_hi, longest * 0.9)
    assert not _closes(problem.plant, points, problem.u_lo, problem.u_hi, longest * 1.1)


@pytest.mark.parametrize("dt", [0.0, 0.005, 0.1])
def test_ordinary_periods_are_accepted(dt):
    assert load_problem(MODELS / "vdp.onnx", MODELS / "vdp.json", dt=dt).dt == dt


def test_cbfsim_certify_with_a_period_of_1e9_exits_1_at_once_with_one_line():
    from conftest import cli_in_process
    run = cli_in_process(["certify", str(MODELS / "vdp.onnx"), str(MODELS / "vdp.json"), "--dt", "1e9"])
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "too long for the reach computation" in run.stderr
