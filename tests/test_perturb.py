"""Perturbed simulation (cbfsim/perturb.py, cbfsim/rng.py): each perturbation against an
independent reference, replay of a single run from its seed, and the robust filter options
in closed loop."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cbfsim.perturb import Perturbation, PerturbationError, disturbance_margin
from cbfsim.rng import counter_uniform
from cbfsim.simulate import simulate, simulate_batch
from systems import get_system

VDP = get_system("van_der_pol", mu=1.0, r=1.5, u_max=2.0)
MODEL = Path(__file__).resolve().parent.parent / "experiments" / "models" / "vdp.onnx"
M64 = 2 ** 64


def _splitmix_reference(seed: int, step: int, lane: int) -> float:
    """The generator in plain Python integers (the contract, written out independently)."""
    def mix(z):
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % M64
        return z ^ (z >> 31)
    z = mix(mix((seed + 0x9E3779B97F4A7C15) % M64) ^ ((256 * step + lane) % M64))
    return 2.0 * ((z >> 11) * 2.0 ** -53) - 1.0


def test_counter_rng_equals_a_big_integer_splitmix64_reference_bit_for_bit():
    rng = np.random.default_rng(0)
    seeds = [0, 1, M64 - 1] + [int(s) for s in rng.integers(0, 2 ** 63, 20)]
    for seed in seeds:
        for step in (0, 1, 999, 2 ** 40):
            for lane in (0, 1, 64, 255):
                assert counter_uniform(seed, step, lane) == _splitmix_reference(seed, step, lane)
    draws = counter_uniform(np.arange(20000), 3, 0)
    assert -1.0 <= draws.min() and draws.max() < 1.0 and abs(draws.mean()) < 0.02


def test_constant_disturbance_matches_scipy_on_the_disturbed_ode():
    from scipy.integrate import solve_ivp
    d = np.array([0.3, -0.2])
    traj = simulate(VDP, None, None, "zero", [0.5, 0.5], t_final=2.0, dt_control=0.01,
                    perturbation=Perturbation(disturbance="constant", disturbance_value=tuple(d)))

    def rhs(_, x):
        return VDP.xdot(x[None, :], np.zeros((1, 1)))[0] + d
    ref = solve_ivp(rhs, (0.0, 2.0), [0.5, 0.5], rtol=1e-11, atol=1e-12, t_eval=traj.t)
    assert np.max(np.abs(traj.x[0] - ref.y.T)) < 1e-7
    plain = simulate(VDP, None, None, "zero", [0.5, 0.5], t_final=2.0, dt_control=0.01)
    assert np.max(np.abs(traj.x[0] - plain.x[0])) > 0.1          # the disturbance did act


def test_one_run_replays_alone_from_its_run_seed_bit_for_bit():
    p = Perturbation(disturbance="uniform", disturbance_bound=(0.2, 0.4), noise=0.01, delay=2, seed=11)
    X0 = np.array([[0.5, 0.5], [-0.8, 0.6], [1.0, -0.2], [0.1, 0.1]])
    batch = simulate_batch(VDP, None, None, "zero", X0, 1.0, 0.01, perturbation=p)
    alone = simulate(VDP, None, None, "zero", X0[2], 1.0, 0.01, perturbation=p, run_seed=13)
    assert np.array_equal(batch.x[2], alone.x[0]) and np.array_equal(batch.u[2], alone.u[0])
    assert batch.metadata["perturbation"]["run_seeds"] == [11, 12, 13, 14]
    other = simulate(VDP, None, None, "zero", X0[2], 1.0, 0.01, perturbation=p, run_seed=14)
    assert not np.array_equal(other.x[0], alone.x[0])


def test_delay_applies_the_filter_output_of_k_periods_earlier():
    calls = []

    def controller(x):            # one call per period: the period's index as the input
        calls.append(len(calls))
        return np.full((len(x), 1), 0.1 * (len(calls) - 1))
    traj = simulate(VDP, None, None, controller, [0.5, 0.5], t_final=0.2, dt_control=0.01,
                    perturbation=Perturbation(delay=3))
    wanted = np.clip(0.1 * (np.arange(20) - 3), -2.0, 2.0)
    wanted[:3] = 0.0                                   # the neutral input before the first output
    assert np.array_equal(traj.u[0, :, 0], wanted)


def test_noise_reaches_what_the_controller_sees_within_its_bound_and_not_the_plant():
    seen = []

    def controller(x):
        seen.append(x.copy())
        return np.zeros((len(x), 1))
    bound = np.array([0.05, 0.01])
    traj = simulate(VDP, None, None, controller, [0.5, 0.5], t_final=0.5, dt_control=0.01,
                    perturbation=Perturbation(noise=tuple(bound), seed=4))
    e = np.concatenate(seen) - traj.x[0, :-1]
    assert np.all(np.abs(e) <= bound) and np.all(np.abs(e).max(axis=0) > 0.5 * bound)
    plain = simulate(VDP, None, None, "zero", [0.5, 0.5], t_final=0.5, dt_control=0.01)
    assert np.array_equal(traj.x, plain.x)             # the zero controller ignores what it sees


def test_mismatched_plant_is_the_system_with_the_other_parameters_and_nothing_else():
    mismatch = simulate(VDP, None, None, "zero", [0.5, 0.5], t_final=1.0, dt_control=0.01,
                        perturbation=Perturbation(plant_params={"mu": 1.7}))
    direct = simulate(VDP.with_params(mu=1.7), None, None, "zero", [0.5, 0.5], t_final=1.0, dt_control=0.01)
    assert np.array_equal(mismatch.x, direct.x)
    with pytest.raises(PerturbationError, match="plant_params"):
        simulate(VDP, None, None, "zero", [0.5, 0.5], 0.1, 0.01, perturbation=Perturbation(plant_params={"nu": 1}))
    with pytest.raises(PerturbationError, match="noise"):
        simulate(VDP, None, None, "zero", [0.5, 0.5], 0.1, 0.01, perturbation=Perturbation(noise=(1.0, 2.0, 3.0)))


@pytest.mark.toolchain
def test_robust_margin_and_issf_keep_h_nonnegative_under_the_worst_case_disturbance_where_the_nominal_filter_fails(cxx):
    from cbfsim.barriers import CompiledBarrier
    from cbfsim.classk import Linear
    from cbfsim.filters.cbf import CBFProjection
    from cbfsim.runtime import compile_barrier
    barrier = CompiledBarrier(compile_barrier(MODEL, inputs=1))
    bound = (0.0, 0.3)                                  # matched: the disturbance acts where u does
    margin = disturbance_margin(MODEL, [-3, -3], [3, 3], bound)
    X0 = np.random.default_rng(0).uniform(-0.9, 0.9, (20, 2))
    worst = Perturbation(disturbance="worst_case", disturbance_bound=bound)

    def min_h(filt):
        return simulate_batch(VDP, barrier, filt, "zero", X0, 6.0, 0.005, perturbation=worst).h.min()
    assert min_h(CBFProjection(VDP, Linear(1.0), margin=0.05)) < 0
    assert min_h(CBFProjection(VDP, Linear(1.0), margin=0.05 + margin)) >= 0
    assert min_h(CBFProjection(VDP, Linear(1.0), margin=0.05, issf=0.5)) >= 0
