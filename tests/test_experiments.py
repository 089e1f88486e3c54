"""The three experiments in fast mode, end to end through the shipped models and the compiled
headers: the summary has every field, the filtered runs never leave the constraint set, the
nominal runs do, and the shipped barrier passes the verifier."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = ("vdp", "bicycle", "pendulum")
REQUIRED = ("min_constraint_filtered", "min_constraint_nominal", "violations_filtered", "violations_nominal",
            "qp_infeasible_steps", "runs", "steps", "wall_time_s", "certificate", "preflight")

pytestmark = pytest.mark.toolchain


def _spec(name: str):
    spec = importlib.util.spec_from_file_location(f"experiment_{name}", ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_fast_mode(name, tmp_path, cxx):
    if not (ROOT / "experiments" / "models" / f"{name}.json").is_file():
        pytest.fail(f"experiments/models/{name}.json is not shipped")
    module = _spec(name)
    status = module.main(module.SPEC, ["--fast", "--out", str(tmp_path)])
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in REQUIRED:
        assert key in summary, key
    for key in ("condition_failures", "containment_failures", "coverage"):
        assert key in summary["verify"], key
    assert summary["violations_filtered"] == 0 and summary["min_constraint_filtered"] >= 0.0
    assert summary["qp_infeasible_steps"] == 0 and summary["solver_errors"] == 0
    assert summary["violations_nominal"] > 0 and summary["min_constraint_nominal"] < 0.0
    assert summary["verify"]["condition_failures"] == 0 and summary["verify"]["containment_failures"] == 0
    assert summary["runs"] == 20
    kinds = {f["kind"] for f in summary["preflight"]}
    assert ("no_certificate" in kinds) == (summary["certificate"] is None)    # recorded, never silent
    for figure in ("phase_portrait.png", "phase_portrait_random.png", "showcase_time_series.png"):
        assert (tmp_path / figure).stat().st_size > 10_000
    assert status == 0


@pytest.mark.parametrize("name,order", [("vdp", 1), ("pendulum", 2)])
def test_experiment_filters_enforce_the_certificates_margin(name: str, order: int) -> None:
    from cbfsim.experiment import _filters, shipped_model
    card, system, _, _ = shipped_model(_spec(name).SPEC)
    for filt in _filters(card, system, order, margin=0.03):
        assert filt.margin.eps == 0.03 and filt.margin.constant
    for filt in _filters(card, system, order):
        assert filt.margin.eps == 0.0 and filt.margin.constant
