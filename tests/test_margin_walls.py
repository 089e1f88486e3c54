"""The margin search's sampled walls (training/certify/margins.py): each estimate is what the
float64 checks say at the states it came from, and the search starts inside them."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "experiments" / "models"


@pytest.fixture(scope="module")
def vdp_problem():
    from training.certify.build import build_problem
    from training.certify.falsify import boundary_states
    problem = build_problem(MODELS / "vdp.onnx", MODELS / "vdp.json", dt=0.005)
    return problem, boundary_states(problem, np.random.default_rng(0))


def test_the_high_wall_is_the_largest_margin_every_sampled_state_is_feasible_with(vdp_problem):
    from training.certify import counterexamples as ce
    from training.certify.margins import sampled_walls
    problem, states = vdp_problem
    low, high = sampled_walls(problem, states)
    assert 0 < low < high < np.inf
    above = ce.check_points(problem, states, high * (1 + 1e-6))["feasibility"]
    below = ce.check_points(problem, states, high * (1 - 1e-6))["feasibility"]
    assert np.any(~np.isnan(above)) and np.all(np.isnan(below))


def test_below_the_low_wall_a_held_input_leaves_the_set_in_fine_rk4_and_above_it_none_does(vdp_problem):
    from training.certify import counterexamples as ce
    from training.certify.falsify import period_low
    from training.certify.margins import WALL_BISECTIONS, sampled_walls
    problem, states = vdp_problem
    low, high = sampled_walls(problem, states)
    worst = period_low(problem, states, 0.5 * low)[1]
    assert ce.sampled_candidates(problem, states, worst, 0.5 * low), "no confirmed run leaves the set below low"
    step = high / 2 ** WALL_BISECTIONS
    assert not np.any(period_low(problem, states, low + 1.01 * step)[0] < 0)
    assert sampled_walls(problem, states, until=0.0) == (0.0, high)        # out of time: no bisection step


def test_the_first_margin_is_a_recorded_one_high_enough_in_the_window_else_two_thirds_up():
    from training.certify.margins import START_MARGIN, START_SHARE, first_margin
    assert first_margin(0.01, 0.25, 0.2) == 0.2
    assert np.isclose(first_margin(0.01, 0.25, 0.02), 0.01 + START_SHARE * 0.24)     # too low to prove in time
    assert np.isclose(first_margin(0.01, 0.25, 0.3), 0.01 + START_SHARE * 0.24)      # infeasible somewhere
    assert np.isclose(first_margin(0.0, 0.3, None), START_SHARE * 0.3)
    assert first_margin(0.3, 0.2, 0.02) == 0.02 and first_margin(0.3, 0.2, None) == START_MARGIN   # crossed
    assert first_margin(0.0, np.inf, None) == START_MARGIN
    assert first_margin(0.0, 0.4, 0.02, held=False) == 0.02                  # continuous time: small is easy
    assert first_margin(0.0, 0.1, None, held=False) == 0.025 and first_margin(0.0, 0.4, None, held=False) == START_MARGIN


def test_a_recorded_margin_below_the_window_is_skipped_and_the_search_certifies_inside_it(tmp_path):
    from training.certify import certify
    from training.certify.falsify import boundary_states
    from training.certify.margins import sampled_walls
    for ext in ("json", "onnx"):
        shutil.copy(MODELS / f"vdp.{ext}", tmp_path / f"vdp.{ext}")
    card = json.loads((tmp_path / "vdp.json").read_text())
    card["config"]["filter_margin"] = 0.001                      # the sampled loop leaves the set here
    (tmp_path / "vdp.json").write_text(json.dumps(card))
    cert = certify(tmp_path / "vdp.onnx", tmp_path / "vdp.json", time_limit=120)
    from training.certify.build import build_problem
    problem = build_problem(tmp_path / "vdp.onnx", tmp_path / "vdp.json")
    low, high = sampled_walls(problem, boundary_states(problem, np.random.default_rng(0)))
    first = cert.margins_tried[0]["margin"]
    assert low < first < high and first != 0.001
    assert cert.certified and low < cert.margin < high
