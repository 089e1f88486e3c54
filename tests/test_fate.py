"""A run's fate is data (cbfsim/fate.py): one table of fates (completed, left_set, faulted) that
every engine produces and every statistic counts, a NaN never compared as safe, and the numpy
and the compiled engine agreeing on each run's fate, step and state."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from cbfsim import fate
from cbfsim.fate import FATES, RunFate, classify, tally
from cbfsim.trajectory import RunStatus, STEP_NOT_RUN, Trajectory

ROOT = Path(__file__).resolve().parent.parent


def _one_of_each(policy: str = "violation") -> Trajectory:
    """Three runs, one per fate, as a producer records them."""
    B, T, n, m = 3, 4, 2, 1
    x = np.zeros((B, T + 1, n))
    x[2, 2] = [np.nan, 1e31]
    x[2, 3:] = np.nan
    records = [RunFate(fate.COMPLETED, min_constraint=0.5).to_dict(),
               RunFate(fate.LEFT_SET, 1, 0.1, (0.0, 0.0), None, -0.25).to_dict(),
               RunFate(fate.FAULTED, 2, 0.2, (float("nan"), 1e31), "non-finite state", 0.1).to_dict()]
    z = np.zeros((B, T))
    return Trajectory(t=np.arange(T + 1) * 0.1, x=x, u_nom=np.zeros((B, T, m)), u=np.zeros((B, T, m)),
                      h=np.zeros((B, T + 1)), Lf=z, Lg=np.zeros((B, T, m)), slack=z, status=z.astype(np.int8),
                      solve_time=z, metadata={"fates": records, "faults": [{"run": 2, "step": 2}]},
                      run_status=np.array([0, 0, 1], dtype=np.int8))


def _consumers(traj: Trajectory, policy: str) -> dict[str, dict]:
    """What each consumer reports for the same three runs: {consumer: {fates, violations, ...}}."""
    from cbfsim.campaign.report import merge
    from cbfsim.campaign.shards import run_seeds
    from cbfsim.campaign.spec import Setting, Spec
    from cbfsim.campaign.store import envelope
    from cbfsim.experiment import _constraint_stats, _fate_counts
    from cbfsim.perturb import Perturbation
    from cbfsim.robustness import fate_row
    fates = traj.fates
    spec = Spec(card=Path("card.json"), runs=3, shard_size=3, t_final=1.0, dt_control=None, controller="zero",
                margin="certified", robust=False, issf=None, settings=[Setting(0, Perturbation(), False)],
                faults=policy, spec_hash="h" * 64, steps=4)
    payload = {"spec_hash": spec.spec_hash, "setting": 0, "shard": 0, "runs": [0, 3],
               "seeds": [int(s) for s in run_seeds(0, 0, np.arange(3))], "fate": [f.fate for f in fates],
               "step": [f.step for f in fates], "min_constraint": [f.min_constraint for f in fates],
               "min_h": [0.0, 0.0, None], "max_slack": [0.0, 0.0, None], "faults": []}
    row = merge(spec, [envelope(payload)])["settings"][0]
    low, experiment_violations = _constraint_stats(None, traj)
    assert low == -np.inf                                    # a faulted run: never a NaN minimum
    experiment_fates = _fate_counts(traj)
    return {"campaign": row, "robustness": fate_row(traj, policy),
            "experiment": {"fates": experiment_fates, "violations": experiment_violations},
            "trajectory": {"fates": traj.fate_counts(), "violations": sum(f.violation for f in fates)}}


@pytest.mark.parametrize("policy", fate.FAULT_POLICIES)
def test_every_consumer_counts_every_fate_and_never_counts_a_faulted_run_safe(policy):
    traj = _one_of_each()
    for name, report in _consumers(traj, policy).items():
        assert set(report["fates"]) == set(FATES), name               # every fate of the table, no other
        assert report["fates"] == {f: 1 for f in FATES}, name
        separate = policy == "separate" and name in ("campaign", "robustness")
        assert report["violations"] == (1 if separate else 2), name   # left_set, and faulted unless apart
        if "judged_runs" in report:                                    # apart: out of the probability, not safe
            assert report["judged_runs"] == (2 if separate else 3), name
            assert report["probability"] == pytest.approx(0.5 if separate else 2 / 3), name


def test_the_run_status_and_the_fates_agree_and_an_unknown_fate_is_refused():
    traj = _one_of_each()
    assert [f.fate == fate.FAULTED for f in traj.fates] == (traj.run_status == RunStatus.FAULTED).tolist()
    assert [f.fate for f in traj[1:].fates] == [fate.LEFT_SET, fate.FAULTED]       # selection follows runs
    with pytest.raises(fate.FateError, match="'lost'.*completed, left_set, faulted"):
        RunFate("lost")
    with pytest.raises(fate.FateError, match="faults must be one of violation, separate"):
        tally([], "ignore")


def test_a_nan_constraint_never_compares_as_safe():
    x = np.zeros((3, 3, 1))
    c = np.array([[1.0, 0.5, 0.0], [1.0, np.nan, 1.0], [1.0, -1e-300, np.nan]])
    fates = classify(c, np.arange(3) * 0.1, x, np.full(3, 3))
    assert [(f.fate, f.step) for f in fates] == [(fate.COMPLETED, None), (fate.LEFT_SET, 1), (fate.LEFT_SET, 1)]
    assert fates[2].min_constraint == -1e-300 and fates[1].min_constraint == 1.0


def test_the_numpy_engine_faults_a_start_beyond_the_divergence_bound_at_step_0_and_a_diverging_run_where_it_diverges():
    from cbfsim.simulate import simulate_batch
    from systems import get_system
    system = get_system("van_der_pol", mu=400.0, r=1.5, u_max=2.0)
    X0 = np.array([[0.0, 0.0], [1e39, 0.0], [1.0, -0.2], [-1.0, 2.0]])
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        traj = simulate_batch(system, None, None, "zero", X0, 1.0, 0.005)
    fates = traj.fates
    assert [f.fate for f in fates][:2] == [fate.COMPLETED, fate.FAULTED]
    assert fates[1].step == 0 and fates[1].state == (1e39, 0.0) and "diverged" in fates[1].cause
    for b in np.flatnonzero(traj.run_status == RunStatus.FAULTED):
        s = fates[b].step
        assert fates[b].fate == fate.FAULTED and fate.diverged(traj.x[b, s:s + 1])[0]
        assert not fate.diverged(traj.x[b, :s]).any()                  # the first such instant
        assert np.isnan(traj.x[b, s + 1:]).all() and (traj.status[b, s:] == STEP_NOT_RUN).all()
    assert {f.fate for f in fates[2:]} <= {fate.LEFT_SET, fate.FAULTED}
    c = system.constraint(X0[2:3])
    assert c[0] >= 0                                                   # they start safe, and none ends safe


@pytest.fixture(scope="module")
def engines(cxx):
    """The same runs in both engines: VdP with mu = 400 under the shipped barrier, from an
    equilibrium, a 1e39 start (inf in float32), and states that leave the set or diverge."""
    from cbfsim.barriers import CompiledBarrier
    from cbfsim.classk import Linear
    from cbfsim.filters import CBFProjection
    from cbfsim.runtime import compile_barrier
    from cbfsim.simulate import simulate_batch
    from systems import get_system
    system = get_system("van_der_pol", mu=400.0, r=1.5, u_max=2.0)
    barrier = CompiledBarrier(compile_barrier(ROOT / "experiments" / "models" / "vdp.onnx", inputs=1))
    filt = CBFProjection(system, Linear(1.0), margin=0.05)
    X0 = np.array([[0.0, 0.0], [1e39, 0.0], [0.5, 0.5], [1.0, -0.2], [-0.8, 0.6], [0.2, 0.1]])
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return {e: simulate_batch(system, barrier, filt, "zero", X0, 1.0, 0.005, engine=e)
                for e in ("numpy", "compiled")}


@pytest.mark.toolchain
def test_the_compiled_engine_and_the_numpy_engine_agree_on_fate_step_and_state(engines):
    numpy_run, compiled = engines["numpy"], engines["compiled"]
    a, b = numpy_run.fates, compiled.fates
    assert [f.fate for f in a] == [f.fate for f in b]
    assert {f.fate for f in a} == set(FATES)                           # every fate occurs
    assert [f.step for f in a] == [f.step for f in b]
    assert np.array_equal(numpy_run.run_status, compiled.run_status)
    for fa, fb in zip(a, b):
        if fa.fate == fate.FAULTED and fa.step == 0:
            assert fa.state == fb.state == (1e39, 0.0)                 # the start as given, not float32's inf
        elif fa.fate == fate.FAULTED:                                  # both beyond the bound (float32: inf/NaN)
            assert fate.diverged(np.array([fa.state]))[0] and fate.diverged(np.array([fb.state]))[0]
        elif fa.fate == fate.LEFT_SET:
            np.testing.assert_allclose(fa.state, fb.state, rtol=1e-3, atol=1e-3)   # float32 round-off
    by_run = lambda traj: sorted((f["run"], f["step"]) for f in traj.metadata["faults"])    # noqa: E731
    assert by_run(numpy_run) == by_run(compiled)


@pytest.mark.toolchain
def test_the_compiled_engine_stops_and_marks_nan_and_diverged_runs_with_step_and_state(engines):
    traj = engines["compiled"]
    faulted = np.flatnonzero(traj.run_status == RunStatus.FAULTED)
    assert len(faulted) >= 2 and 1 in faulted                          # the 1e39 start is one of them
    steps = {f["run"]: f["step"] for f in traj.metadata["faults"]}
    assert steps[1] == 0 and "diverged" in traj.metadata["faults"][0]["cause"]
    assert any(not np.isfinite(traj.fates[b].state).all() for b in faulted)      # a NaN/inf state too
    for b in faulted:
        s = steps[b]
        assert traj.fates[b].step == s and fate.diverged(traj.x[b, s:s + 1])[0]
        assert not fate.diverged(traj.x[b, :s]).any()
        assert np.isnan(traj.x[b, s + 1:]).all() and np.isnan(traj.h[b, s:]).all()
        assert (traj.status[b, s:] == STEP_NOT_RUN).all()
    assert np.isfinite(traj.x[traj.run_status == RunStatus.COMPLETED]).all()


def test_a_non_finite_input_faults_the_run_and_is_named_in_the_cause():
    from cbfsim.simulate import simulate_batch
    from systems import get_system
    system = get_system("van_der_pol")
    broken = lambda X: np.where(X[:, :1] > 0.4, np.nan, 0.0)      # noqa: E731  (NaN for the first run only)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        traj = simulate_batch(system, None, None, broken, np.array([[0.5, 0.0], [0.0, 0.0]]), 0.1, 0.01)
    first, second = traj.fates
    assert (first.fate, first.step, second.fate) == (fate.FAULTED, 1, fate.COMPLETED)
    assert "non-finite state" in first.cause and "after a non-finite input u = [nan]" in first.cause
    assert traj.metadata["faults"][0]["cause"] == first.cause
