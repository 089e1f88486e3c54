"""Misusing the Gymnasium adapter gives one clear error, never a numpy reshape message or a
silent step: actions of the wrong shape, periods that are not finite and positive, start
states of the wrong shape, and stepping before reset or after the episode ended."""
from __future__ import annotations

import re

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium", reason="pip install 'cbfsim[gym]'")

from cbfsim.gym import EpisodeOrderError, GymInputError, SafetyFilterWrapper, make  # noqa: E402

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name,action,shape", [("van_der_pol", [0.1, 0.2], "(2,)"),
                                               ("van_der_pol", [[0.1]], "(1, 1)"),
                                               ("bicycle", [0.1, 0.2, 0.3], "(3,)"),
                                               ("bicycle", [[0.1], [0.2]], "(2, 1)"),
                                               ("bicycle", 0.5, "()")])
def test_an_action_of_the_wrong_shape_is_refused_naming_the_expected_and_actual_shape(name, action, shape):
    env = make(name)
    env.reset(seed=0)
    m = env.system.m
    with pytest.raises(GymInputError, match=rf"the action must have shape \({m},\) .* got shape {re.escape(shape)}$"):
        env.step(np.array(action))


def test_a_scalar_action_for_a_one_input_plant_steps_like_the_vector():
    env = make("van_der_pol")
    env.reset(options={"x0": [0.5, 0.5]})
    a = env.step(np.float32(0.25))[0]
    env.reset(options={"x0": [0.5, 0.5]})
    assert np.array_equal(a, env.step(np.array([0.25], dtype=np.float32))[0])


@pytest.mark.parametrize("dt", [float("inf"), float("nan"), 0.0, -0.01, "fast", None])
def test_a_period_that_is_not_finite_and_positive_is_refused(dt):
    with pytest.raises(GymInputError, match=r"need a finite dt > 0"):
        make("van_der_pol", dt=dt)


@pytest.mark.parametrize("kwargs", [{"substeps": 0}, {"substeps": 1.5}, {"max_steps": 0}])
def test_substeps_and_max_steps_must_be_whole_and_positive(kwargs):
    with pytest.raises(GymInputError):
        make("van_der_pol", **kwargs)


@pytest.mark.parametrize("x0,message", [([0.5], r"must have shape \(2,\), got shape \(1,\)"),
                                        ([0.5, float("nan")], "must be finite"), (["a", "b"], "must be 2 numbers")])
def test_a_start_state_of_the_wrong_shape_or_not_finite_is_refused(x0, message):
    with pytest.raises(GymInputError, match=r"options\['x0'\] " + message):
        make("van_der_pol").reset(options={"x0": x0})


def test_stepping_before_reset_raises():
    env = make("van_der_pol")
    with pytest.raises(EpisodeOrderError, match=r"reset has not been called; call reset\(\) first"):
        env.step(np.zeros(1, dtype=np.float32))
    assert isinstance(EpisodeOrderError("x"), gym.error.ResetNeeded)


def test_stepping_after_termination_raises_until_reset():
    env = make("van_der_pol", dt=0.05)
    env.reset(options={"x0": [0.0, 1.49]})               # at the edge of the disk, pushed out
    for step in range(1, 200):
        *_, terminated, truncated, _ = env.step(np.array([2.0], dtype=np.float32))
        if terminated:
            break
    assert terminated
    with pytest.raises(EpisodeOrderError, match=rf"the episode ended at step {step} \(the state left the constraint"):
        env.step(np.array([0.0], dtype=np.float32))
    env.reset(options={"x0": [0.5, 0.5]})
    env.step(np.array([0.0], dtype=np.float32))          # a fresh episode steps again


def test_stepping_after_truncation_raises():
    env = make("van_der_pol", max_steps=2)
    env.reset(options={"x0": [0.5, 0.5]})
    env.step(np.zeros(1, dtype=np.float32))
    *_, truncated, _ = env.step(np.zeros(1, dtype=np.float32))
    assert truncated
    with pytest.raises(EpisodeOrderError, match="max_steps reached"):
        env.step(np.zeros(1, dtype=np.float32))


@pytest.mark.toolchain
def test_the_filter_wrapper_refuses_a_wrong_action_shape_and_a_step_before_reset(cxx):
    from cbfsim import CBFProjection, CompiledBarrier, Linear, compile_barrier
    barrier = CompiledBarrier(compile_barrier(ROOT / "experiments" / "models" / "vdp.onnx", inputs=1))
    base = make("van_der_pol")
    env = SafetyFilterWrapper(base, barrier, CBFProjection(base.system, Linear(1.0)))
    with pytest.raises(EpisodeOrderError):
        env.step(np.zeros(1, dtype=np.float32))
    env.reset(options={"x0": [0.5, 0.5]})
    with pytest.raises(GymInputError, match=r"shape \(1,\) .* got shape \(2,\)"):
        env.step(np.zeros(2, dtype=np.float32))
