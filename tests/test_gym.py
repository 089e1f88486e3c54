"""Gymnasium: a plant as an environment, and the safety-filter wrapper, against Gymnasium's
own environment checker; a random agent with the filter never leaves the set, without it does."""
from __future__ import annotations

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium", reason="pip install 'cbfsim[gym]'")
from gymnasium.utils.env_checker import check_env  # noqa: E402

from cbfsim.gym import PlantEnv, SafetyFilterWrapper, make  # noqa: E402

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def vdp_barrier(cxx):
    from cbfsim import CompiledBarrier, compile_barrier
    return CompiledBarrier(compile_barrier(ROOT / "experiments" / "models" / "vdp.onnx", inputs=1))


def test_a_plant_is_a_gymnasium_environment_that_passes_the_checker():
    env = make("van_der_pol", dt=0.01, max_steps=50)
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=3)
    assert env.system.constraint(obs[None, :])[0] >= 0 and info["constraint"] >= 0
    again, _ = env.reset(seed=3)
    assert np.array_equal(obs, again)                                  # seeded resets repeat
    x, *_ = env.reset(options={"x0": [0.5, 0.5]})
    obs, reward, terminated, truncated, info = env.step(np.array([0.0], dtype=np.float32))
    from cbfsim.simulate import rk4_zoh
    expected = rk4_zoh(env.system, np.array([[0.5, 0.5]]), np.zeros((1, 1)), 0.01, 1)[0]
    assert np.array_equal(obs, expected) and reward == -(expected @ expected)
    assert not terminated and not truncated


@pytest.mark.toolchain
def test_the_safety_filter_wrapper_passes_the_checker_and_reports_interventions(vdp_barrier):
    from cbfsim import CBFProjection, Linear
    env = SafetyFilterWrapper(make("van_der_pol", max_steps=50), vdp_barrier, CBFProjection(make("van_der_pol").system,
                                                                                            Linear(1.0)))
    check_env(env, skip_render_check=True)
    env.reset(options={"x0": [0.0, 1.3]})                               # near the top of the disk, moving out
    _, _, _, _, info = env.step(np.array([2.0], dtype=np.float32))      # full throttle outward
    cbf = info["cbf"]
    assert cbf["intervened"] and cbf["u"][0] < cbf["u_nom"][0] and cbf["h"] >= 0
    assert set(cbf) == {"h", "intervened", "u_nom", "u", "status"}


@pytest.mark.toolchain
def test_a_random_agent_stays_safe_with_the_filter_and_not_without(vdp_barrier):
    from cbfsim import CBFProjection, Linear

    def episode(wrap: bool) -> tuple[bool, int]:
        base = make("van_der_pol", max_steps=2000)
        env = SafetyFilterWrapper(base, vdp_barrier, CBFProjection(base.system, Linear(1.0))) if wrap else base
        env.reset(seed=0, options={"x0": [0.5, 0.5]})
        env.action_space.seed(0)
        interventions = 0
        for _ in range(2000):
            _, _, terminated, truncated, info = env.step(env.action_space.sample())
            interventions += bool(info.get("cbf", {}).get("intervened"))
            if terminated:
                return True, interventions
            if truncated:
                break
        return False, interventions

    left_unfiltered, _ = episode(wrap=False)
    left_filtered, interventions = episode(wrap=True)
    assert left_unfiltered, "the random agent never left the disk: the test would prove nothing"
    assert not left_filtered and interventions > 0
