"""Honest simulations: a run that starts outside its guarantee, or rests on an unproven model,
is flagged (warning, recorded) and refused under strict."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from cbfsim.preflight import (PreflightWarning, UnsafeRunError, card_findings, initial_state_findings,
                              report)


def test_initial_states_outside_the_constraint_or_certified_set_are_named_by_run():
    constraint = np.array([0.5, -0.25, 0.1, 0.3])
    h = np.array([0.2, -0.1, -0.05, 0.4])
    psi1 = np.array([0.1, 0.3, 0.2, -1e-9])
    findings = initial_state_findings(constraint, h, psi1)
    kinds = {f.kind: f for f in findings}
    assert kinds["x0_outside_constraint_set"].runs == [1]
    assert "min constraint -0.25" in kinds["x0_outside_constraint_set"].message
    assert kinds["x0_outside_certified_set"].runs == [1, 2, 3]          # psi1 < 0 counts at order 2
    assert "{h >= 0, psi1 >= 0}" in kinds["x0_outside_certified_set"].message
    assert initial_state_findings(np.array([1.0]), np.array([0.0]), np.array([0.0])) == []   # boundary is inside
    nan = initial_state_findings(np.array([np.nan]), np.array([np.nan]))
    assert {f.kind for f in nan} == {"x0_outside_constraint_set", "x0_outside_certified_set"}


@pytest.mark.parametrize("verification, certificate, expected", [
    ({"passed": True}, {"certified": True}, set()),
    ({"passed": False, "condition_failures": 3}, {"certified": True}, {"card_verification_failed"}),
    (None, None, {"card_not_verified", "no_certificate"}),
    ({"passed": True}, {"certified": False}, {"certificate_failed"}),
])
def test_what_the_card_does_not_prove_is_a_finding(verification, certificate, expected):
    assert {f.kind for f in card_findings({"verification": verification}, certificate)} == expected


def test_findings_warn_and_are_recorded_by_default_and_raise_under_strict():
    findings = card_findings({"verification": {"passed": False}}, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        recorded = report(findings, strict=False, where="run")
    assert [r["kind"] for r in recorded] == ["card_verification_failed", "no_certificate"]
    assert len(caught) == 2 and all(issubclass(w.category, PreflightWarning) for w in caught)
    with pytest.raises(UnsafeRunError, match="run: the model card's sampled verification FAILED"):
        report(findings, strict=True, where="run")
    assert report([], strict=True) == []


def test_simulate_flags_an_initial_state_outside_the_constraint_set_and_strict_refuses_it():
    from cbfsim import CBFProjection, Linear, simulate, simulate_batch
    from cbfsim.barriers import AnalyticBarrier
    from systems import get_system
    system = get_system("van_der_pol")
    disk = AnalyticBarrier(lambda X: 2.25 - X[:, 0] ** 2 - X[:, 1] ** 2, lambda X: -2.0 * X, n=2, m=1)
    filt = CBFProjection(system, Linear(1.0))
    with pytest.warns(PreflightWarning, match=r"1 of 2 runs \(run 1\) start outside the constraint set"):
        traj = simulate_batch(system, disk, filt, "zero", [[0.5, 0.5], [2.0, 0.0]], t_final=0.05, dt_control=0.01)
    kinds = {f["kind"] for f in traj.metadata["preflight"]}
    assert kinds == {"x0_outside_constraint_set", "x0_outside_certified_set"}
    with pytest.raises(UnsafeRunError):
        simulate(system, disk, filt, "zero", [2.0, 0.0], t_final=0.05, dt_control=0.01, strict=True)
    inside = simulate(system, disk, filt, "zero", [0.5, 0.5], t_final=0.05, dt_control=0.01, strict=True)
    assert inside.metadata["preflight"] == []


@pytest.mark.toolchain
def test_the_simulate_command_warns_about_an_unproven_model_and_strict_refuses_it_leaving_no_files(tmp_path, cxx):
    from pathlib import Path

    from conftest import cli_in_process
    card = Path(__file__).resolve().parent.parent / "experiments" / "models" / "refuted" / "vdp_relu.json"
    base = ["simulate", str(card), "--x0", "0.5", "0.5", "--t-final", "0.2"]
    warned = cli_in_process(base + ["--out", str(tmp_path / "warn")])
    assert warned.returncode == 0 and "certificate says NOT certified" in warned.stderr
    refused = cli_in_process(base + ["--out", str(tmp_path / "strict"), "--strict"])
    assert refused.returncode == 1 and refused.stderr.strip().splitlines() == [
        "cbfsim simulate: error: the model's certificate says NOT certified"]
    assert not (tmp_path / "strict").exists()
